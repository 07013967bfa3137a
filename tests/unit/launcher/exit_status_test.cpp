#include "portal/exit_status.hpp"

#include <csignal>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

namespace portal {
namespace {

// A real wait status from a child that ends as `body` makes it.
template <typename F>
int wait_status_of(F body) {
    pid_t pid = fork();
    if (pid == 0) {
        body();
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

TEST(InterpretWaitStatus, ExitCodeIsMirrored) {
    auto out = interpret_wait_status(wait_status_of([] { _exit(75); }), 0);
    EXPECT_EQ(out.exit_code, 75);
    EXPECT_FALSE(out.report);
}

TEST(InterpretWaitStatus, SigkillIsExplained) {
    auto out = interpret_wait_status(wait_status_of([] { raise(SIGKILL); }), 0);
    EXPECT_EQ(out.exit_code, 128 + SIGKILL);
    ASSERT_TRUE(out.report);
    EXPECT_EQ(out.report->subject, "killed");
    EXPECT_NE(out.report->problem.find("out-of-memory killer"), std::string::npos);
}

TEST(InterpretWaitStatus, ForwardedSignalNeedsNoExplanation) {
    auto out = interpret_wait_status(wait_status_of([] { raise(SIGTERM); }), SIGTERM);
    EXPECT_EQ(out.exit_code, 128 + SIGTERM);
    EXPECT_FALSE(out.report);
}

TEST(InterpretWaitStatus, SigintIsPythonsOwnExit) {
    auto out = interpret_wait_status(wait_status_of([] { raise(SIGINT); }), 0);
    EXPECT_EQ(out.exit_code, 130);
    EXPECT_FALSE(out.report);
}

TEST(InterpretWaitStatus, OtherSignalsAreNamed) {
    auto out = interpret_wait_status(wait_status_of([] {
                                         signal(SIGUSR1, SIG_DFL);
                                         raise(SIGUSR1);
                                     }),
                                     0);
    EXPECT_EQ(out.exit_code, 128 + SIGUSR1);
    ASSERT_TRUE(out.report);
    EXPECT_NE(out.report->problem.find("SIGUSR1"), std::string::npos);
}

TEST(SignalName, NamesAndNumbers) {
    EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
    EXPECT_EQ(signal_name(SIGSEGV), "SIGSEGV");
}

}  // namespace
}  // namespace portal
