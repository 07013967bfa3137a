#include "portal/preempt.hpp"

#include <csignal>
#include <unistd.h>

#include <gtest/gtest.h>

namespace portal::preempt {
namespace {

TEST(Preempt, SignalNamesNumbersAndRefusals) {
    EXPECT_EQ(parse_signal("USR1"), SIGUSR1);
    EXPECT_EQ(parse_signal("sigusr2"), SIGUSR2);
    EXPECT_EQ(parse_signal("SIGTERM"), SIGTERM);
    EXPECT_EQ(parse_signal("10"), 10);
    for (const char* bad : {"KILL", "SIGSTOP", "CHLD", "NOPE", "0", "", "999", "-1"}) {
        EXPECT_EQ(parse_signal(bad), -1) << bad;
    }
}

TEST(Preempt, TheRequestSignalIsARealTimeOne) {
    EXPECT_GE(request_signal(), SIGRTMIN);
    EXPECT_LE(request_signal(), SIGRTMAX);
}

TEST(Preempt, OnlyItsSignalsArePreemptionsAndASecondOneChangesNothing) {
    reset();
    Settings s;
    s.signals.push_back(SIGUSR1);
    configure(s);
    const pid_t child = 12345;
    EXPECT_FALSE(note_signal(SIGHUP, 1, child));   // forwarded as it is
    EXPECT_FALSE(pending());
    EXPECT_TRUE(note_signal(SIGUSR1, 1, child));
    EXPECT_TRUE(pending());
    EXPECT_TRUE(note_signal(SIGTERM, 1, child));    // taken, nothing more to do
    EXPECT_TRUE(pending());
    next_child();   // a request that came before the child is its to take
    EXPECT_TRUE(pending());
    reset();
    EXPECT_FALSE(pending());
    Settings off;
    off.enabled = false;
    configure(off);
    EXPECT_FALSE(note_signal(SIGTERM, 1, child));   // off: forwarded as it is
    configure(Settings{});
}

}  // namespace
}  // namespace portal::preempt
