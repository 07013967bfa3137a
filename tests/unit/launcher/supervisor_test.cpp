#include "portal/supervisor.hpp"

#include <csignal>
#include <gtest/gtest.h>
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
