#include "portal/supervisor.hpp"

#include <csignal>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
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
    struct rlimit before {};
    getrlimit(RLIMIT_DATA, &before);
    EXPECT_EQ(supervise({"/bin/sh", "-c", "[ \"$(ulimit -d)\" = 65536 ]"}, 64ull << 20), 0);
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

}  // namespace
}  // namespace portal
