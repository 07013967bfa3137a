#include "portal/job_lock.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace portal {
namespace {

class JobLockTest : public ::testing::Test {
protected:
    fs::path home;
    Job job;
    void SetUp() override {
        char tmpl[] = "/tmp/portal_jl_XXXXXX";
        home = mkdtemp(tmpl);
        job = create_job(home, "lock", {{"state", "running"}});
    }
    void TearDown() override { fs::remove_all(home); }
};

TEST_F(JobLockTest, SecondHolderIsRefusedNamingTheFirst) {
    // flock is per open file description: a second acquire in this process
    // conflicts just as another process's would.
    JobLock first = JobLock::acquire(job, "portal resume lock-x");
    ASSERT_TRUE(lock_holder(job).has_value());
    EXPECT_NE(lock_holder(job)->find("portal resume lock-x"), std::string::npos);
    EXPECT_NE(lock_holder(job)->find("pid " + std::to_string(getpid())), std::string::npos);
    try {
        JobLock::acquire(job, "portal resume again");
        FAIL() << "expected JobBusy";
    } catch (const JobBusy& e) {
        EXPECT_NE(std::string(e.what()).find("portal resume lock-x"), std::string::npos) << e.what();
    }
}

TEST_F(JobLockTest, ReleasedWhenTheHolderEndsHoweverItEnds) {
    { JobLock lock = JobLock::acquire(job, "a"); }
    EXPECT_FALSE(lock_holder(job).has_value());
    const pid_t child = fork();
    if (child == 0) {
        JobLock lock = JobLock::acquire(job, "killed");
        pause();
        _exit(0);
    }
    for (int i = 0; i < 200 && !lock_holder(job); ++i) usleep(10000);
    ASSERT_TRUE(lock_holder(job).has_value());
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    EXPECT_FALSE(lock_holder(job).has_value());
    JobLock again = JobLock::acquire(job, "b");  // does not throw
}

TEST(EffectiveState, RunningWithoutAHolderIsLost) {
    EXPECT_EQ(effective_state({{"state", "running"}}, true), "running");
    EXPECT_EQ(effective_state({{"state", "running"}}, false), "lost");
    EXPECT_EQ(effective_state({{"state", "suspended"}}, false), "suspended");
    EXPECT_EQ(effective_state(nlohmann::json::object(), false), "unknown");
}

}  // namespace
}  // namespace portal
