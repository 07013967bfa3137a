#include "portal/memory_watch.hpp"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "portal/preempt.hpp"

namespace portal::tripwire {
namespace {

constexpr std::uint64_t MiB = 1024ull * 1024;
constexpr std::uint64_t GiB = 1024 * MiB;
constexpr std::uint64_t kPage = 4096;

TEST(AddressCeiling, MachineAndSwapAndTheCap) {
    EXPECT_EQ(address_ceiling(2 * GiB - 256 * MiB, 24 * GiB, 0), 26 * GiB - 256 * MiB);
    EXPECT_EQ(address_ceiling(1 * GiB, 8 * GiB, 4 * GiB), 13 * GiB);
}

TEST(Statm, AnonymousResidentAndData) {
    // size resident shared text lib data dt, in pages
    const auto usage = parse_statm("100000 3000 1000 500 0 20000 0\n", kPage);
    ASSERT_TRUE(usage);
    EXPECT_EQ(usage->resident, 2000 * kPage);
    EXPECT_EQ(usage->data, 20000 * kPage);
}

TEST(Statm, SharedNeverMoreThanResident) {
    const auto usage = parse_statm("10 3 7 0 0 5 0", kPage);
    ASSERT_TRUE(usage);
    EXPECT_EQ(usage->resident, 0u);
}

TEST(Statm, NotStatm) {
    EXPECT_FALSE(parse_statm("", kPage));
    EXPECT_FALSE(parse_statm("1 2 3", kPage));
    EXPECT_FALSE(parse_statm("a b c d e f g", kPage));
}

TEST(Decide, FarFromTheCapTheCeiling) {
    const Decision d = decide({100 * MiB, 8 * GiB}, 1 * GiB, 30 * GiB, false);
    EXPECT_FALSE(d.lowered);
    EXPECT_FALSE(d.over);
    EXPECT_EQ(d.limit, 30 * GiB);  // untouched reservations are not counted
}

TEST(Decide, NearTheCapTheHeadroomLeft) {
    const std::uint64_t cap = 1 * GiB;
    const std::uint64_t resident = static_cast<std::uint64_t>(cap * kHighWater) + MiB;
    const Decision d = decide({resident, 8 * GiB}, cap, 30 * GiB, false);
    EXPECT_TRUE(d.lowered);
    EXPECT_FALSE(d.over);
    EXPECT_EQ(d.limit, 8 * GiB + (cap - resident));
}

TEST(Decide, Hysteresis) {
    const std::uint64_t cap = 1 * GiB;
    const std::uint64_t between = static_cast<std::uint64_t>(cap * (kHighWater + kLowWater) / 2);
    EXPECT_FALSE(decide({between, GiB}, cap, 30 * GiB, false).lowered);  // rising: not yet
    EXPECT_TRUE(decide({between, GiB}, cap, 30 * GiB, true).lowered);    // falling: not yet raised
    const std::uint64_t below = static_cast<std::uint64_t>(cap * kLowWater) - MiB;
    const Decision raised = decide({below, GiB}, cap, 30 * GiB, true);
    EXPECT_FALSE(raised.lowered);
    EXPECT_EQ(raised.limit, 30 * GiB);
}

TEST(Decide, PastTheCapNoHeadroomAndARequest) {
    const Decision d = decide({2 * GiB, 3 * GiB}, 1 * GiB, 30 * GiB, false);
    EXPECT_TRUE(d.over);
    EXPECT_EQ(d.limit, 3 * GiB);  // no allocation more
}

TEST(Decide, AddressSpaceFreedUntouchedStaysTheProgramsRoom) {
    const std::uint64_t cap = 1 * GiB;
    const Usage held{900 * MiB, 4 * GiB};
    const Decision first = decide(held, cap, 30 * GiB, false);
    ASSERT_TRUE(first.lowered);
    EXPECT_EQ(first.limit, 4 * GiB + 124 * MiB);
    // The rescue lets its 32 MiB reserve of zero pages go: data falls, resident not.
    const Decision freed = decide({900 * MiB, 4 * GiB - 32 * MiB}, cap, 30 * GiB, true, held, first.limit);
    EXPECT_EQ(freed.limit, first.limit);  // 124 + 32 MiB of room now, not 124
}

TEST(Decide, WrittenPagesOfOldReservationsTakeRoom) {
    const std::uint64_t cap = 1 * GiB;
    const Usage held{800 * MiB, 4 * GiB};
    const Decision first = decide(held, cap, 30 * GiB, false);
    // 100 MiB more written, no new allocation: the limit comes down by as much.
    const Decision written = decide({900 * MiB, 4 * GiB}, cap, 30 * GiB, true, held, first.limit);
    EXPECT_EQ(written.limit, first.limit - 100 * MiB);
    // A new allocation written at once: its data takes the room, the limit stays.
    const Decision grown = decide({1000 * MiB, 4 * GiB + 100 * MiB}, cap, 30 * GiB, true, {900 * MiB, 4 * GiB},
                                  written.limit);
    EXPECT_EQ(grown.limit, written.limit);
}

TEST(Decide, AnUntouchedBufferMadeAndFreedChangesNothing) {
    const std::uint64_t cap = 1 * GiB;
    const Usage held{800 * MiB, 4 * GiB};
    const Decision first = decide(held, cap, 30 * GiB, false);
    const Usage with_buffer{800 * MiB, 4 * GiB + 16 * MiB};
    const Decision made = decide(with_buffer, cap, 30 * GiB, true, held, first.limit);
    EXPECT_EQ(made.limit, first.limit);  // its data takes 16 MiB of room
    const Decision freed = decide(held, cap, 30 * GiB, true, with_buffer, made.limit);
    EXPECT_EQ(freed.limit, first.limit);  // and gives it back, no more
}

TEST(Decide, NeverBelowTheDataItHas) {
    const std::uint64_t cap = 1 * GiB;
    const Usage held{800 * MiB, 2 * GiB};
    const Decision first = decide(held, cap, 30 * GiB, false);
    ASSERT_TRUE(first.lowered);
    // An array written at once, past the cap: 500 MiB of pages of data it had.
    const Usage over{1200 * MiB, 2 * GiB};
    const Decision past = decide(over, cap, 30 * GiB, true, held, first.limit);
    EXPECT_TRUE(past.over);
    EXPECT_EQ(past.limit, 2 * GiB);  // no allocation more, but not below what it has
    // The rescue's reserve let go: its 32 MiB are the room of the request's work.
    const Decision freed = decide({1200 * MiB, 2 * GiB - 32 * MiB}, cap, 30 * GiB, true, over, past.limit);
    EXPECT_EQ(freed.limit, 2 * GiB);
}

TEST(Decide, NeverAboveTheCeiling) {
    const Decision d = decide({900 * MiB, 40 * GiB}, 1 * GiB, 30 * GiB, false);
    EXPECT_EQ(d.limit, 30 * GiB);
}

TEST(NextLook, EveryPollFromTheHighWaterUpAndWhileLowered) {
    const std::uint64_t cap = 8 * GiB;
    const auto poll = std::chrono::milliseconds(kDefaultPollMilliseconds);
    EXPECT_EQ(next_look({7 * GiB, 8 * GiB}, cap, false, kDefaultPollMilliseconds), poll);
    EXPECT_EQ(next_look({6 * GiB, 8 * GiB}, cap, false, kDefaultPollMilliseconds), poll);  // 75%
    // lowered: between the low and the high water on the way down
    EXPECT_EQ(next_look({5 * GiB, 8 * GiB}, cap, true, kDefaultPollMilliseconds), poll);
}

TEST(NextLook, FarBelowNoLaterThanTheFastestGrowthReachesTheHighWater) {
    const std::uint64_t cap = 24 * GiB;
    const std::uint64_t high = 18 * GiB;  // kHighWater of it
    for (std::uint64_t resident : {0 * GiB, 1 * GiB, 4 * GiB, 12 * GiB, 17 * GiB}) {
        const auto wait = next_look({resident, resident}, cap, false, kDefaultPollMilliseconds);
        const double grown = static_cast<double>(kMaxGrowthBytesPerSecond) * wait.count() / 1000.0;
        EXPECT_LE(grown, static_cast<double>(high - resident)) << resident;
        EXPECT_GE(wait.count(), kDefaultPollMilliseconds) << resident;
        EXPECT_LE(wait.count(), kMaxLookMilliseconds) << resident;
    }
    // 1 GiB of 24: 17 GiB to the high water at 64 GiB/s is 265 ms, not 5.
    EXPECT_EQ(next_look({1 * GiB, 1 * GiB}, cap, false, kDefaultPollMilliseconds).count(), 265);
    // a nearer look as the memory grows
    EXPECT_GT(next_look({1 * GiB, 1 * GiB}, cap, false, 5), next_look({12 * GiB, 12 * GiB}, cap, false, 5));
}

TEST(NextLook, NeverSoonerThanThePollNorLaterThanTheLongestWait) {
    // a small cap: the high water is nearer than one poll at the fastest growth
    EXPECT_EQ(next_look({10 * MiB, 10 * MiB}, 256 * MiB, false, 5).count(), 5);
    EXPECT_EQ(next_look({10 * MiB, 10 * MiB}, 256 * MiB, false, 20).count(), 20);
    EXPECT_EQ(next_look({0, 0}, 1024 * GiB, false, 5).count(), kMaxLookMilliseconds);
}

TEST(MemorySignal, AfterThePreemptionRequest) {
    EXPECT_EQ(memory_signal(), preempt::request_signal() + 1);
    EXPECT_LE(memory_signal(), SIGRTMAX);
}

// A child that writes memory past a small cap: the watcher lowers its RLIMIT_DATA
// (seen by the child itself) once resident memory passes the high water.
TEST(MemoryWatch, LowersTheLimitNearTheCapAndRaisesItAgain) {
    int to_parent[2];
    int to_child[2];
    ASSERT_EQ(pipe(to_parent), 0);
    ASSERT_EQ(pipe(to_child), 0);
    const std::uint64_t cap = 256 * MiB;
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        char go;
        std::vector<char> block(static_cast<std::size_t>(cap * 0.9));
        std::memset(block.data(), 1, block.size());  // resident: past the high water
        // The block is never read: without this barrier GCC 16 (Debian testing) elides
        // the allocation, memset and all (new/delete elision), and nothing is resident.
        asm volatile("" : : "r"(block.data()) : "memory");
        if (write(to_parent[1], "w", 1) != 1) _exit(1);
        if (read(to_child[0], &go, 1) != 1) _exit(1);
        struct rlimit lowered {};
        getrlimit(RLIMIT_DATA, &lowered);
        std::vector<char>().swap(block);  // back under the low water
        if (write(to_parent[1], "f", 1) != 1) _exit(1);
        if (read(to_child[0], &go, 1) != 1) _exit(1);
        struct rlimit raised {};
        getrlimit(RLIMIT_DATA, &raised);
        const bool ok = lowered.rlim_cur < 2 * cap && raised.rlim_cur == 64 * GiB;
        _exit(ok ? 0 : 2);
    }
    {
        MemoryWatch watch(pid, cap, 64 * GiB);
        const auto settle = std::chrono::milliseconds(20 * MemoryWatch::poll_milliseconds());
        char got;
        ASSERT_EQ(read(to_parent[0], &got, 1), 1);
        std::this_thread::sleep_for(settle);
        ASSERT_EQ(write(to_child[1], "g", 1), 1);
        ASSERT_EQ(read(to_parent[0], &got, 1), 1);
        std::this_thread::sleep_for(settle);
        ASSERT_EQ(write(to_child[1], "g", 1), 1);
        int status = 0;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        EXPECT_TRUE(WIFEXITED(status));
        EXPECT_EQ(WEXITSTATUS(status), 0);
    }
    for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) close(fd);
}

// Far under its cap the watcher waits up to kMaxLookMilliseconds between looks: its
// end (the supervisor's, once the program is reaped) must not wait for the next one.
TEST(MemoryWatch, StopsAtOnceBetweenLooks) {
    int to_child[2];
    ASSERT_EQ(pipe(to_child), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        char go;
        _exit(read(to_child[0], &go, 1) == 1 ? 0 : 1);
    }
    const std::uint64_t cap = 1024 * GiB;  // the longest wait between looks
    ASSERT_EQ(next_look({0, 0}, cap, false, MemoryWatch::poll_milliseconds()).count(), kMaxLookMilliseconds);
    const auto started = std::chrono::steady_clock::now();
    {
        MemoryWatch watch(pid, cap, 64 * GiB);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // its first look is done
    }
    const auto took = std::chrono::steady_clock::now() - started;
    EXPECT_LT(took, std::chrono::milliseconds(kMaxLookMilliseconds / 2));
    ASSERT_EQ(write(to_child[1], "g", 1), 1);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    close(to_child[0]);
    close(to_child[1]);
}

}  // namespace
}  // namespace portal::tripwire
