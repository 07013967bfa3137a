// preempt.cpp: see include/portal/preempt.hpp.
#include "portal/preempt.hpp"

#include <atomic>
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
constexpr std::size_t kStatusBytes = 4096;
constexpr int kHexBase = 16;

Settings g_settings;
// Set by the handler: the signal that asked for a preemption (0: none pending),
// when (CLOCK_MONOTONIC seconds), whether the interpreter said that no loop can
// take it.  The wait loop reads them.
std::atomic<int> g_original{0};
std::atomic<double> g_since{0};
std::atomic<bool> g_give_up{false};
bool g_requested = false;

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

bool is_preempt_signal(int signo) {
    for (int s : g_settings.signals) {
        if (s == signo) return true;
    }
    return false;
}

}  // namespace

bool catches(pid_t pid, int signo) { return has_mask_bit(pid, "SigCgt:", signo); }

int request_signal() { return SIGRTMIN + kRequestOffset; }

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

void reset() {
    g_original.store(0);
    g_give_up.store(false);
    g_requested = false;
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
    if (now() - g_since.load() >= g_settings.grace_seconds) {
        deliver("no loop iteration started within the grace of " + seconds(g_settings.grace_seconds) +
                " (--preempt-grace): the program gets " + name + ", as under python");
    }
}

}  // namespace portal::preempt
