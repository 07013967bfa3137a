// memory_watch.cpp: see include/portal/memory_watch.hpp.
#include "portal/memory_watch.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <pthread.h>
#include <sstream>
#include <sys/resource.h>
#include <unistd.h>

#include "portal/log.hpp"
#include "portal/preempt.hpp"
#include "portal/size.hpp"

namespace portal::tripwire {

namespace {

// statm's fields: size resident shared text lib data dt (pages).
constexpr int kStatmFields = 7;
constexpr int kStatmResident = 1;
constexpr int kStatmShared = 2;
constexpr int kStatmData = 5;
constexpr std::size_t kStatmBytes = 256;
constexpr int kMaxPollMilliseconds = 1000;

std::uint64_t page_size() {
    const long page = sysconf(_SC_PAGE_SIZE);
    return page > 0 ? static_cast<std::uint64_t>(page) : 4096;
}

bool set_soft_limit(pid_t pid, std::uint64_t soft) {
    struct rlimit old {};
    if (prlimit(pid, RLIMIT_DATA, nullptr, &old) != 0) return false;
    struct rlimit limit = old;
    limit.rlim_cur = std::min(static_cast<rlim_t>(soft), old.rlim_max);
    return prlimit(pid, RLIMIT_DATA, &limit, nullptr) == 0;
}

}  // namespace

int memory_signal() { return preempt::request_signal() + 1; }

namespace {
// How many times the program asked for room (note_room_request): odd while held.
std::atomic<unsigned> g_room_requests{0};
}  // namespace

void note_room_request() { g_room_requests.fetch_add(1); }

std::uint64_t address_ceiling(std::uint64_t cap, std::uint64_t physical, std::uint64_t swap) {
    return physical + swap + cap;
}

std::optional<Usage> parse_statm(const std::string& text, std::uint64_t page) {
    std::istringstream in(text);
    std::uint64_t field[kStatmFields] = {};
    for (auto& f : field) {
        if (!(in >> f)) return std::nullopt;
    }
    const std::uint64_t resident = field[kStatmResident];
    const std::uint64_t shared = std::min(field[kStatmShared], resident);
    return Usage{(resident - shared) * page, field[kStatmData] * page};
}

Decision decide(const Usage& usage, std::uint64_t cap, std::uint64_t ceiling, bool lowered,
                const Usage& before, std::uint64_t limit) {
    const auto high = static_cast<std::uint64_t>(static_cast<double>(cap) * kHighWater);
    const auto low = static_cast<std::uint64_t>(static_cast<double>(cap) * kLowWater);
    Decision d;
    d.lowered = lowered ? usage.resident >= low : usage.resident >= high;
    d.over = usage.resident > cap;
    if (!d.lowered) {
        d.limit = ceiling;
        return d;
    }
    const std::uint64_t headroom = cap > usage.resident ? cap - usage.resident : 0;
    const std::uint64_t target = usage.data + headroom;
    if (lowered) {
        // Resident growth not matched by new data: pages of older reservations
        // written now, which take room the limit must give back.
        const std::uint64_t grown = usage.resident > before.resident ? usage.resident - before.resident : 0;
        const std::uint64_t added = usage.data > before.data ? usage.data - before.data : 0;
        const std::uint64_t taken = grown > added ? grown - added : 0;
        // Nothing else moves it: data that comes and goes (an untouched buffer
        // made and let go between two looks) must not ratchet the room up.  A
        // reservation written only after a look counts twice (its data, then its
        // pages): the head-room errs small, never past the cap.
        // Never below the data size it already has (then no allocation more), nor
        // down to it from above by a fall in data alone.
        const std::uint64_t kept = limit > taken ? limit - taken : 0;
        d.limit = std::min(ceiling, std::max(kept, std::min(limit, usage.data)));
    } else {
        d.limit = std::min(ceiling, target);
    }
    return d;
}

std::chrono::milliseconds next_look(const Usage& usage, std::uint64_t cap, bool lowered, int poll_ms) {
    const auto poll = std::chrono::milliseconds(poll_ms);
    const auto high = static_cast<std::uint64_t>(static_cast<double>(cap) * kHighWater);
    if (lowered || usage.resident >= high) return poll;
    constexpr std::uint64_t kMillisecondsPerSecond = 1000;
    const std::uint64_t ms = (high - usage.resident) / (kMaxGrowthBytesPerSecond / kMillisecondsPerSecond);
    const auto longest = static_cast<std::uint64_t>(std::max(poll_ms, kMaxLookMilliseconds));
    return std::max(poll, std::chrono::milliseconds(std::min(ms, longest)));
}

int MemoryWatch::poll_milliseconds() {
    const char* text = std::getenv(kPollVariable);
    if (text != nullptr) {
        char* end = nullptr;
        const long ms = std::strtol(text, &end, 10);
        if (end != text && *end == '\0' && ms >= 1 && ms <= kMaxPollMilliseconds) return static_cast<int>(ms);
    }
    return kDefaultPollMilliseconds;
}

MemoryWatch::MemoryWatch(pid_t pid, std::uint64_t cap, std::uint64_t soft_limit)
    : pid_(pid), cap_(cap), ceiling_(soft_limit) {
    // The thread takes none of the supervisor's signals: they must interrupt the
    // wait loop's poll (preempt.hpp), on the main thread.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    thread_ = std::thread([this] { run(); });
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

MemoryWatch::~MemoryWatch() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
}

bool MemoryWatch::stop_within(std::chrono::milliseconds interval) {
    std::unique_lock<std::mutex> lock(mutex_);
    return wake_.wait_for(lock, interval, [this] { return stop_; });
}

void MemoryWatch::run() {
    const std::string path = "/proc/" + std::to_string(pid_) + "/statm";
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    const std::uint64_t page = page_size();
    const int poll_ms = poll_milliseconds();
    bool lowered = false;
    bool requested = false;
    std::uint64_t limit = ceiling_;
    unsigned room_seen = g_room_requests.load();
    bool room = false;   // the rescue's room: the ceiling, held until it is given back
    Usage before;
    char buf[kStatmBytes];
    for (;;) {
        // pread at 0 makes /proc regenerate the file: one open for the whole run.
        const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
        if (n <= 0) break;  // the process is gone
        buf[n] = '\0';
        const auto usage = parse_statm(buf, page);
        if (!usage || usage->data == 0) break;  // a zombie has no memory left to watch
        const unsigned asked = g_room_requests.load();
        if (asked != room_seen) {
            room_seen = asked;
            room = (asked % 2) == 1;
            if (room && set_soft_limit(pid_, ceiling_)) limit = ceiling_;
            log::debug("memory tripwire", room ? "the rescue asked for room: the address-space limit is its ceiling "
                                                 "until the rescue is done"
                                               : "the rescue gave its room back");
            // Given back: the next look bounds the limit afresh by the head-room.
            if (!room) lowered = false;
        }
        const Decision d = decide(*usage, cap_, ceiling_, lowered, before, limit);
        before = *usage;
        const std::uint64_t moved = d.limit > limit ? d.limit - limit : limit - d.limit;
        // Once a suspension is asked for, the limit is the ceiling again and comes
        // down no more: the rescue at the safe point (its writer's threads, the
        // pickler) needs room while the program's memory is still held.
        const bool held = (requested || room) && d.lowered && d.limit < limit;
        if (!held && (d.lowered != lowered || moved >= kLimitStep)) {
            if (set_soft_limit(pid_, d.limit)) limit = d.limit;
            lowered = d.lowered;
        }
        // Not while the rescue holds its room: it suspends the job already.
        if (d.over && !requested && !room) {
            // Only an interpreter with Portal's bootstrap takes the request; the
            // signal's default action would end any other.
            requested = true;
            if (preempt::catches(pid_, memory_signal())) {
                log::debug("memory tripwire", "resident memory " + format_size(usage->resident) +
                                                  " passed the cap of " + format_size(cap_) +
                                                  ": a suspension is asked for at the next safe point");
                kill(pid_, memory_signal());
                if (set_soft_limit(pid_, ceiling_)) limit = ceiling_;
            }
        }
        if (stop_within(next_look(*usage, cap_, lowered || requested, poll_ms))) break;
    }
    close(fd);
}

}  // namespace portal::tripwire
