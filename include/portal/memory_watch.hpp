// memory_watch.hpp: the memory tripwire's watcher of resident memory, a thread of
// the supervisor (never of the program), so that the cap counts what the program
// really uses and not address space it never touches (docs/architecture.md "The
// memory tripwire").
//
// The interpreter starts with an address-space limit (RLIMIT_DATA) well above the
// machine, address_ceiling(): a reservation python would be given (two untouched
// 12 GiB np.zeros on a 24 GiB machine) is given under Portal too.  The watcher
// reads the program's anonymous resident memory from /proc/PID/statm, every poll
// interval near the cap and less often far below it (next_look()):
//   - from kHighWater of the cap up, it lowers the program's RLIMIT_DATA
//     (prlimit) to its current data size plus the head-room the cap has left
//     (cap - resident), so that the next allocation that would pass the cap fails
//     inside the program, a MemoryError, the ordinary rescue (the iteration runs
//     again from its start);
//   - below kLowWater it raises the limit back to the ceiling (hysteresis);
//   - past the cap itself (one allocation written at once, grown past the cap
//     between two looks), it asks the program to suspend at its next safe point
//     (memory_signal(), python/_portal/rescue/safepoint.py, reason "memory"), and gives
//     the limit back its ceiling for the rescue's own work (the cap has been
//     passed already; the safe point may come while the memory is still held).
// What is counted: the interpreter process's anonymous resident pages (statm's
// resident less its file-backed and shared ones); DataLoader workers and other
// children are their own processes, each with the limit it inherited, and are not
// added up (their pages shared with the parent would count twice).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <sys/types.h>
#include <thread>
#include "portal/job_contract.hpp"  // generated: the environment variables' names

namespace portal::tripwire {

// The fraction of the cap from which address space is bounded by the head-room
// left, and the one below which it is unbounded again.
constexpr double kHighWater = 0.75;
constexpr double kLowWater = 0.6;
// How often resident memory is looked at near the cap (PORTAL_TRIPWIRE_POLL_MS
// replaces it, for bench/tripwire_watch.py); docs/architecture.md has its cost.
constexpr int kDefaultPollMilliseconds = 5;
constexpr const char* kPollVariable = ::portal::contract::env::kTripwirePollMs;
// Far below the cap: the fastest a program is taken to write fresh memory (this
// host writes 0.3-0.5 GiB/s with one thread; 64 GiB/s is a large server's memory
// bandwidth), and the longest wait between two looks.
constexpr std::uint64_t kMaxGrowthBytesPerSecond = 64ull << 30;
constexpr int kMaxLookMilliseconds = 1000;
// The limit is rewritten only when it moves by at least this much.
constexpr std::uint64_t kLimitStep = 1ull << 20;
// The environment variables that tell the interpreter the suspension request's
// signal and the cap (safepoint.py removes them before the program starts).
constexpr const char* kMemorySignalVariable = ::portal::contract::env::kMemorySignal;
constexpr const char* kMemoryCapVariable = ::portal::contract::env::kMemoryCap;

// The real-time signal a memory suspension request travels on: the one after
// preempt::request_signal().
int memory_signal();

// The program's rescue asks for room on the same signal, sent to its parent (the
// supervisor): the first time the watcher gives the program the ceiling back and
// holds it there (the rescue's threads and pickler are address space, and the
// limit is full when it runs), the second time (the rescue declined: the program
// goes on) it watches as before.  Async-signal-safe: the supervisor's handler
// calls it for a signal the child sent.
void note_room_request();

// --- pure: the rules ----------------------------------------------------------------

// The program's RLIMIT_DATA while its resident memory is well under the cap: the
// machine's physical memory and swap (no single allocation of python's can be
// larger: the kernel's overcommit heuristic refuses it) plus the cap, for the
// program's reservations that are never touched.
std::uint64_t address_ceiling(std::uint64_t cap, std::uint64_t physical, std::uint64_t swap);

// One look at /proc/PID/statm (its fields in pages): `resident` is the anonymous
// resident memory (resident - shared), `data` the data segment (data + stack,
// what RLIMIT_DATA bounds, within the stack's few pages), both in bytes.
struct Usage {
    std::uint64_t resident = 0;
    std::uint64_t data = 0;
};
std::optional<Usage> parse_statm(const std::string& text, std::uint64_t page_size);

// What one look decides.  `before` is the previous look's usage and `limit` the
// limit it set (`lowered` whether it was bounded by the head-room).  While
// lowered, the limit is set once to the data size plus the head-room (cap -
// resident), then comes down only by what resident memory grew beyond new data
// (pages of older reservations written), so that address space freed without
// resident memory falling (an untouched reservation let go: the rescue's reserve,
// rescue/entry.py) stays the program's room, and one made and freed between two looks
// changes nothing.
struct Decision {
    bool lowered = false;     // bounded by the head-room (from kHighWater to kLowWater)
    std::uint64_t limit = 0;  // the RLIMIT_DATA the program should have now
    bool over = false;        // past the cap: ask for a suspension
};
Decision decide(const Usage& usage, std::uint64_t cap, std::uint64_t ceiling, bool lowered,
                const Usage& before = {}, std::uint64_t limit = 0);

// How long after a look at `usage` the next one comes.  From the high water up, or
// while the limit is `lowered`, every `poll_ms`.  Below it, the time the program
// would take to write its way up to the high water at kMaxGrowthBytesPerSecond
// (so that the look which first finds it past the high water comes no later than
// the one at poll_ms would near there), never less than poll_ms and never more
// than kMaxLookMilliseconds.  Why: each look wakes a core; at 5 ms that is ~1.3%
// of one here, and where no core is idle it preempts the program 200 times a
// second, a cost no count of the program's own instructions shows (a program far
// under its cap is now looked at a few times a second).
std::chrono::milliseconds next_look(const Usage& usage, std::uint64_t cap, bool lowered, int poll_ms);

// --- the thread ---------------------------------------------------------------------

// Watches `pid` from construction until destruction (or the process's end); no
// signal of the supervisor's is ever taken on its thread.  `soft_limit` is the
// program's RLIMIT_DATA at start (a lower one the user set stays the most it is
// given).
class MemoryWatch {
public:
    MemoryWatch(pid_t pid, std::uint64_t cap, std::uint64_t soft_limit);
    ~MemoryWatch();
    MemoryWatch(const MemoryWatch&) = delete;
    MemoryWatch& operator=(const MemoryWatch&) = delete;

    // The poll interval in use near the cap (kDefaultPollMilliseconds or
    // PORTAL_TRIPWIRE_POLL_MS).
    static int poll_milliseconds();

private:
    void run();
    // Waits `interval` or until the destructor asks the thread to stop; true if asked.
    bool stop_within(std::chrono::milliseconds interval);

    pid_t pid_;
    std::uint64_t cap_;
    std::uint64_t ceiling_;
    // Guards stop_ for the wait (a look may be a second away: the supervisor's end
    // must not wait for it).
    std::mutex mutex_;
    std::condition_variable wake_;
    bool stop_ = false;
    std::thread thread_;
};

}  // namespace portal::tripwire
