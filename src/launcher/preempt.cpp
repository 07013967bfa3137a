// preempt.cpp: see include/portal/preempt.hpp.
#include "portal/preempt.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "portal/exit_status.hpp"
#include "portal/log.hpp"

namespace portal::preempt {

namespace {

// Above glibc's own (SIGRTMIN itself is glibc's first free one).
constexpr int kRequestOffset = 4;
// +5 is the memory tripwire's (memory_watch.cpp: request_signal() + 1).
constexpr int kWritingOffset = 6;
constexpr std::size_t kStatusBytes = 4096;
constexpr int kHexBase = 16;

Settings g_settings;
// Set by the handler: the signal that asked for a preemption (0: none pending),
// when (CLOCK_MONOTONIC seconds), whether the interpreter said that no loop can
// take it.  The wait loop reads them.
std::atomic<int> g_original{0};
std::atomic<double> g_since{0};
std::atomic<bool> g_give_up{false};
// Set by the handler: the interpreter said it is writing a checkpoint.
std::atomic<bool> g_writing{false};
bool g_requested = false;
// The write's progress last seen (bytes written + CPU ticks) and when it changed.
unsigned long long g_progress = 0;
double g_progress_at = 0;

std::string seconds(double s) {
    char text[32];
    std::snprintf(text, sizeof text, "%g s", s);
    return text;
}

double now() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// Whether signal `signo` is in the mask `field` ("SigCgt:" caught, "SigIgn:"
// ignored) of /proc/PID/status: hexadecimal, bit N-1 for signal N.
bool has_mask_bit(pid_t pid, const char* field, int signo) {
    const std::string path = "/proc/" + std::to_string(pid) + "/status";
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    char buf[kStatusBytes];
    const ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return false;
    buf[n] = '\0';
    const char* line = std::strstr(buf, field);
    if (line == nullptr) return false;
    line += std::strlen(field);
    while (*line == ' ' || *line == '\t') ++line;
    const char* end = line;
    while (std::isxdigit(static_cast<unsigned char>(*end))) ++end;
    // The mask's bit signo-1, counted from the right end of the hex digits.
    const int bit = signo - 1;
    const long digit_index = static_cast<long>(end - line) - 1 - bit / 4;
    if (digit_index < 0) return false;
    const std::string digit(1, line[digit_index]);
    return (std::stoi(digit, nullptr, kHexBase) >> (bit % 4)) & 1;
}

bool ignores(pid_t pid, int signo) { return has_mask_bit(pid, "SigIgn:", signo); }

// Whether the child still runs the supervisor's own program (between fork and
// exec, when it still has the supervisor's handlers): nothing of it is the
// program's yet.
bool before_exec(pid_t pid) {
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) return false;
    const auto child = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec);
    return !ec && child == self;
}

// A number that grows while process `pid` does anything: the bytes it has
// written (/proc/PID/io "wchar", write(2) and pwrite(2) alike) plus its CPU
// ticks (/proc/PID/stat utime + stime).  0 when neither can be read.
unsigned long long progress_of(pid_t pid) {
    unsigned long long total = 0;
    char buf[kStatusBytes];
    const std::string proc = "/proc/" + std::to_string(pid);
    int fd = open((proc + "/io").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        const ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n > 0) {
            buf[n] = '\0';
            if (const char* at = std::strstr(buf, "wchar:")) total += std::strtoull(at + 6, nullptr, 10);
        }
    }
    fd = open((proc + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        const ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n > 0) {
            buf[n] = '\0';
            // After the command's ")" (which may hold anything): fields 3.., utime
            // and stime are the 14th and 15th.
            const char* p = std::strrchr(buf, ')');
            for (int field = 2; p != nullptr && field < 14; ++field) p = std::strchr(p + 1, ' ');
            if (p != nullptr) {
                char* end = nullptr;
                total += std::strtoull(p + 1, &end, 10);
                if (end != nullptr) total += std::strtoull(end, nullptr, 10);
            }
        }
    }
    return total;
}

bool is_preempt_signal(int signo) {
    for (int s : g_settings.signals) {
        if (s == signo) return true;
    }
    return false;
}

}  // namespace

bool catches(pid_t pid, int signo) { return has_mask_bit(pid, "SigCgt:", signo); }

int request_signal() { return SIGRTMIN + kRequestOffset; }
int writing_signal() { return SIGRTMIN + kWritingOffset; }

void configure(const Settings& settings) { g_settings = settings; }
const Settings& settings() { return g_settings; }

int parse_signal(const std::string& text) {
    std::string name = text;
    for (auto& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (name.rfind("SIG", 0) == 0) name = name.substr(3);
    int signo = -1;
    if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos && name.size() < 4) {
        signo = std::stoi(name);
    } else {
        for (int s = 1; s < SIGRTMIN; ++s) {
            const char* abbrev = sigabbrev_np(s);
            if (abbrev != nullptr && name == abbrev) signo = s;
        }
    }
    if (signo <= 0 || signo >= SIGRTMIN || signo == SIGKILL || signo == SIGSTOP || signo == SIGCHLD) return -1;
    return signo;
}

bool note_signal(int signo, pid_t sender, pid_t child) {
    if (!g_settings.enabled) return false;
    if (signo == writing_signal()) {
        if (sender == child) g_writing.store(true);  // at its safe point, writing its checkpoint
        return true;
    }
    if (signo == request_signal()) {
        if (sender == child) g_give_up.store(true);  // no loop could take the request
        return true;
    }
    if (!is_preempt_signal(signo)) return false;
    int none = 0;
    if (g_original.compare_exchange_strong(none, signo)) {
        g_since.store(now());
    }
    return true;  // a second one while pending: nothing more to do
}

bool pending() { return g_original.load() != 0; }

namespace {
void hold(int signo, siginfo_t* info, void*) { note_signal(signo, info != nullptr ? info->si_pid : 0, 0); }
}  // namespace

void hold_until_supervised() {
    if (!g_settings.enabled) return;
    struct sigaction sa {};
    sa.sa_sigaction = hold;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (int signo : g_settings.signals) {
        struct sigaction current {};
        sigaction(signo, nullptr, &current);
        // A signal the command was started with ignored (nohup) stays ignored.
        if ((current.sa_flags & SA_SIGINFO) || current.sa_handler != SIG_IGN) sigaction(signo, &sa, nullptr);
    }
}

void reset() {
    g_original.store(0);
    next_child();
}

void next_child() {
    // A request that came before this child (while `portal resume` checked the
    // job, or during a retry's hand-over) stays pending for it, its grace counted
    // from now.
    if (g_original.load() != 0) g_since.store(now());
    g_give_up.store(false);
    g_writing.store(false);
    g_requested = false;
    g_progress = 0;
    g_progress_at = 0;
}

void tick(pid_t child, int* forwarded) {
    const int original = g_original.load();
    if (original == 0 || child <= 0) return;
    const std::string name = signal_name(original);
    auto deliver = [&](const std::string& why) {
        if (!why.empty()) log::say("preempt", why);
        *forwarded = original;
        kill(child, original);
        g_original.store(0);
    };
    if (!g_requested && !before_exec(child)) {
        if (catches(child, original) || ignores(child, original)) {
            return deliver("");  // the program's own handler (or SIG_IGN): honoured, as under python
        }
        if (catches(child, request_signal())) {
            kill(child, request_signal());
            g_requested = true;
        }
    }
    if (g_give_up.load()) {
        return deliver("");  // the interpreter said why
    }
    if (g_writing.load()) {
        // The grace is over once the program writes its checkpoint: the write is
        // watched for progress instead, and a hung one ends as the grace would.
        const unsigned long long progress = progress_of(child);
        const double t = now();
        if (g_progress_at == 0 || progress != g_progress) {
            g_progress = progress;
            g_progress_at = t;
        }
        const double stall = std::max(kWriteStallSeconds, g_settings.grace_seconds);
        if (t - g_progress_at >= stall) {
            deliver("the checkpoint write made no progress for " + seconds(stall) + ": the program gets " + name +
                    ", as under python");
        }
        return;
    }
    if (now() - g_since.load() >= g_settings.grace_seconds) {
        deliver("no loop iteration started within the grace of " + seconds(g_settings.grace_seconds) +
                " (--preempt-grace): the program gets " + name + ", as under python");
    }
}

}  // namespace portal::preempt
