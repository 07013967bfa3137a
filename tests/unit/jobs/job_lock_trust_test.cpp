// job.lock is attacker-controlled until checked on its open descriptor
// (src/jobs/job_lock.cpp): never followed through a symbolic link, never blocked on
// as a FIFO, never truncated when it is not a private regular file of the user's.
#include "portal/job_lock.hpp"
#include "portal/store_trust.hpp"

#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <future>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace portal {
namespace {

class JobLockTrustTest : public ::testing::Test {
protected:
    fs::path home;
    Job job;
    void SetUp() override {
        char tmpl[] = "/tmp/portal_jlt_XXXXXX";
        home = mkdtemp(tmpl);
        job = create_job(home, "lock", {{"state", "suspended"}});
    }
    void TearDown() override { fs::remove_all(home); }

    std::string refusal_of_acquire() {
        try {
            JobLock lock = JobLock::acquire(job, "portal resume lock");
        } catch (const JobBusy& e) {
            return std::string("busy: ") + e.what();
        } catch (const JobError& e) {
            return e.what();
        }
        return "";
    }
};

TEST_F(JobLockTrustTest, ASymlinkIsRefusedAndItsTargetUntouched) {
    const fs::path victim = home / "precious.txt";
    std::ofstream(victim) << "keep me\n";
    fs::create_symlink(victim, job.lock_path());
    const std::string why = refusal_of_acquire();
    EXPECT_NE(why.find("job.lock: a symlink; it cannot be trusted"), std::string::npos) << why;
    std::ifstream in(victim);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text, "keep me\n");
    EXPECT_EQ(fs::status(victim).permissions() & fs::perms::group_write, fs::perms::none);
    EXPECT_THROW(lock_holder(job), StoreUntrusted);  // and reading it trusts nothing of it
}

TEST_F(JobLockTrustTest, AFifoIsRefusedWithoutBlocking) {
    ASSERT_EQ(mkfifo(job.lock_path().c_str(), 0600), 0);
    // Without O_NONBLOCK, opening a FIFO nobody writes blocks forever.
    auto acquired = std::async(std::launch::async, [this] { return refusal_of_acquire(); });
    ASSERT_EQ(acquired.wait_for(std::chrono::seconds(5)), std::future_status::ready) << "acquire blocked";
    EXPECT_NE(acquired.get().find("job.lock: a FIFO, not a regular file; it cannot be trusted"), std::string::npos);
    auto read = std::async(std::launch::async, [this] { return lock_holder(job); });
    ASSERT_EQ(read.wait_for(std::chrono::seconds(5)), std::future_status::ready) << "lock_holder blocked";
    EXPECT_THROW(read.get(), StoreUntrusted);
}

TEST_F(JobLockTrustTest, AFileOthersMayWriteIsRefusedNotRepaired) {
    std::ofstream(job.lock_path()) << "pid 1, planted\n";
    fs::permissions(job.lock_path(), fs::perms::owner_read | fs::perms::owner_write | fs::perms::others_write);
    const std::string why = refusal_of_acquire();
    EXPECT_NE(why.find("job.lock: writable by group or others (mode 0602); it cannot be trusted"), std::string::npos) << why;
    EXPECT_EQ(fs::file_size(job.lock_path()), std::string("pid 1, planted\n").size());  // not truncated
}

TEST_F(JobLockTrustTest, AHardLinkIsRefused) {
    const fs::path other = home / "other";
    std::ofstream(other) << "x";
    fs::permissions(other, fs::perms::owner_read | fs::perms::owner_write);
    fs::create_hard_link(other, job.lock_path());
    EXPECT_NE(refusal_of_acquire().find("job.lock: 2 hard links; it cannot be trusted"), std::string::npos);
    EXPECT_EQ(fs::file_size(other), 1u);
}

TEST_F(JobLockTrustTest, AnotherUsersFileIsRefused) {
    if (geteuid() != 0) GTEST_SKIP() << "giving a file away (chown) needs root";
    std::ofstream(job.lock_path()) << "";
    ASSERT_EQ(chown(job.lock_path().c_str(), 65534, 65534), 0);
    EXPECT_NE(refusal_of_acquire().find("job.lock: owned by uid 65534; it cannot be trusted"), std::string::npos);
}

// The holder's text names the program too, once it runs; and a process that has
// a duplicate of the descriptor (the interpreter) keeps the job locked after the
// holder itself is gone.
TEST_F(JobLockTrustTest, ADuplicateInAnotherProcessKeepsTheJobLocked) {
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    const pid_t holder = fork();
    if (holder == 0) {
        JobLock lock = JobLock::acquire(job, "portal resume lock");
        lock.name_program(4243);
        const int copy = fcntl(lock.fd(), F_DUPFD, 0);  // without close-on-exec, as the interpreter gets it
        const pid_t heir = fork();
        if (heir == 0) {
            close(ready[0]);
            const pid_t me = getpid();
            if (write(ready[1], &me, sizeof me) != sizeof me) _exit(1);
            pause();  // holds `copy` until killed
            _exit(0);
        }
        (void)copy;
        _exit(0);  // the holder ends; its child keeps the descriptor
    }
    close(ready[1]);
    pid_t heir = 0;
    ASSERT_EQ(read(ready[0], &heir, sizeof heir), static_cast<ssize_t>(sizeof heir));
    int status = 0;
    waitpid(holder, &status, 0);
    const auto who = lock_holder(job);
    ASSERT_TRUE(who.has_value()) << "the lock went with its first holder";
    EXPECT_NE(who->find("portal resume lock"), std::string::npos) << *who;
    EXPECT_NE(who->find("; program pid 4243"), std::string::npos) << *who;
    EXPECT_NE(refusal_of_acquire().find("busy: job " + job.id + " is in use by pid "), std::string::npos);
    kill(heir, SIGKILL);  // the holder's orphan: once it is gone, so is the lock
    for (int i = 0; i < 500 && lock_holder(job); ++i) usleep(10000);
    EXPECT_FALSE(lock_holder(job).has_value());
    close(ready[0]);
}

}  // namespace
}  // namespace portal
