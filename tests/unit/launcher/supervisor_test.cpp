#include "portal/supervisor.hpp"

#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <fstream>
#include <thread>
#include <unistd.h>

namespace portal {
namespace {

TEST(Supervise, MirrorsTheExitCode) {
    EXPECT_EQ(supervise({"/bin/sh", "-c", "exit 75"}), 75);
    EXPECT_EQ(supervise({"/bin/sh", "-c", "exit 0"}), 0);
}

TEST(Supervise, ChildKilledBySignalGives128PlusN) {
    EXPECT_EQ(supervise({"/bin/sh", "-c", "kill -KILL $$"}), 128 + SIGKILL);
}

// The memory tripwire's cap reaches the child (ulimit -d counts KiB), not the parent.
TEST(Supervise, SetsTheDataLimitInTheChild) {
    // The address cap sets RLIMIT_DATA at the cap itself (the resident default
    // sets it above the machine: e2e.tripwire).
    setenv("PORTAL_MEMORY_TRIPWIRE", "address", 1);
    struct rlimit before {};
    getrlimit(RLIMIT_DATA, &before);
    EXPECT_EQ(supervise({"/bin/sh", "-c", "[ \"$(ulimit -d)\" = 65536 ]"}, 64ull << 20), 0);
    unsetenv("PORTAL_MEMORY_TRIPWIRE");
    struct rlimit after {};
    getrlimit(RLIMIT_DATA, &after);
    EXPECT_EQ(after.rlim_cur, before.rlim_cur);
    EXPECT_EQ(supervise({"/bin/sh", "-c", "[ \"$(ulimit -d)\" = 65536 ]"}), 1);
}

TEST(Supervise, MissingInterpreterIs127) {
    EXPECT_EQ(supervise({"/nonexistent/python3"}), 127);
}

// SIGTERM sent to the supervisor alone reaches the child, whose own exit is
// mirrored.  Run in a forked process so the test binary's handlers stay intact.
TEST(Supervise, ForwardsSigtermToTheChild) {
    pid_t pid = fork();
    if (pid == 0) {
        int code = supervise({"/bin/sh", "-c", "trap 'exit 42' TERM; while :; do sleep 0.05; done"});
        _exit(code);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 42);
}

// The interpreter never outlives its supervisor: SIGKILL of the supervisor ends it.
TEST(Supervise, TheChildDiesWithItsSupervisor) {
    int pids[2];
    ASSERT_EQ(pipe(pids), 0);
    const pid_t supervisor = fork();
    if (supervisor == 0) {
        close(pids[0]);
        supervise({"/bin/sleep", "30"}, std::nullopt, nullptr, -1, [&](pid_t child) {
            if (write(pids[1], &child, sizeof child) != sizeof child) _exit(1);
        });
        _exit(0);
    }
    close(pids[1]);
    pid_t child = 0;
    ASSERT_EQ(read(pids[0], &child, sizeof child), static_cast<ssize_t>(sizeof child));
    close(pids[0]);
    kill(supervisor, SIGKILL);
    int status = 0;
    waitpid(supervisor, &status, 0);
    // The orphan is init's to reap: gone means /proc no longer shows it running.
    bool gone = false;
    for (int i = 0; i < 200 && !gone; ++i) {
        gone = kill(child, 0) != 0 || std::filesystem::exists("/proc/" + std::to_string(child) + "/stat") == false;
        if (!gone) {
            std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
            std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
            gone = text.find(") Z ") != std::string::npos || text.empty();
        }
        if (!gone) usleep(10000);
    }
    EXPECT_TRUE(gone) << "pid " << child << " outlived its supervisor";
    if (!gone) kill(child, SIGKILL);
}

// The job's lock reaches the interpreter as its own descriptor named in
// PORTAL_LOCK_FD (not close-on-exec); without a lock, no PORTAL_LOCK_FD at all.
TEST(Supervise, HandsTheJobLockToTheChild) {
    const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    setenv(kLockFdVariable, "999", 1);  // a stale value from outside is never passed on
    EXPECT_EQ(supervise({"/bin/sh", "-c", "[ -n \"$PORTAL_LOCK_FD\" ] && [ \"$PORTAL_LOCK_FD\" != 999 ] && "
                                         "[ \"$(readlink /proc/self/fd/$PORTAL_LOCK_FD)\" = /dev/null ]"},
                        std::nullopt, nullptr, fd),
              0);
    EXPECT_EQ(supervise({"/bin/sh", "-c", "[ -z \"${PORTAL_LOCK_FD+set}\" ]"}), 0);
    unsetenv(kLockFdVariable);
    close(fd);
}

// Run `code` as a supervisor would end: supervise the shell command, then
// end_as_the_program_did.  Returns the forked supervisor's wait status.
int status_of_supervisor_for(const std::string& command, bool allow_core) {
    const pid_t pid = fork();
    if (pid == 0) {
        const int code = supervise({"/bin/sh", "-c", command});
        if (allow_core) {  // after the child ran: only the supervisor could dump now
            struct rlimit unlimited {};
            getrlimit(RLIMIT_CORE, &unlimited);
            unlimited.rlim_cur = unlimited.rlim_max;
            setrlimit(RLIMIT_CORE, &unlimited);
        }
        _exit(end_as_the_program_did(code) == code ? 100 + code % 100 : 99);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

TEST(EndAsTheProgramDid, DiesOfTheSignalTheProgramDiedOf) {
    for (int sig : {SIGINT, SIGTERM, SIGKILL, SIGHUP}) {
        const int status = status_of_supervisor_for("kill -" + std::to_string(sig) + " $$", false);
        ASSERT_TRUE(WIFSIGNALED(status)) << "signal " << sig << ": status " << status;
        EXPECT_EQ(WTERMSIG(status), sig);
    }
}

TEST(EndAsTheProgramDid, AnExitIsAnExit) {
    const int status = status_of_supervisor_for("exit 3", false);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 103);  // end_as_the_program_did returned the code
}

// SIGSEGV or SIGABRT of the program: the supervisor dies of it too, but never
// leaves a core of its own, whatever its core limit.
TEST(EndAsTheProgramDid, NeverDumpsCoreForTheProgram) {
    char tmpl[] = "/tmp/portal_core_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    const auto cwd = std::filesystem::current_path();
    std::filesystem::current_path(dir);
    struct rlimit before {};
    getrlimit(RLIMIT_CORE, &before);
    struct rlimit none = before;
    none.rlim_cur = 0;  // the shell itself must not dump here
    setrlimit(RLIMIT_CORE, &none);
    for (int sig : {SIGSEGV, SIGABRT, SIGQUIT}) {
        const int status = status_of_supervisor_for("kill -" + std::to_string(sig) + " $$", true);
        ASSERT_TRUE(WIFSIGNALED(status)) << "signal " << sig;
        EXPECT_EQ(WTERMSIG(status), sig);
        EXPECT_FALSE(WCOREDUMP(status)) << "signal " << sig;
    }
    setrlimit(RLIMIT_CORE, &before);
    std::filesystem::current_path(cwd);
    EXPECT_TRUE(std::filesystem::is_empty(dir)) << "a core was written in " << dir;
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace portal
