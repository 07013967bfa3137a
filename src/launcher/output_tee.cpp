// output_tee.cpp: see include/portal/output_tee.hpp.
#include "portal/output_tee.hpp"

#include "portal/log.hpp"
#include "portal/store_trust.hpp"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <string>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

namespace portal {

namespace {

bool write_all(int fd, const char* p, std::size_t n) {
    while (n > 0) {
        const ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= static_cast<std::size_t>(w);
    }
    return true;
}

// The pseudo-terminals standing in for real ones, for SIGWINCH: {real, master}.
std::atomic<int> g_winch_pairs[2][2] = {{{-1}, {-1}}, {{-1}, {-1}}};

// The program's terminal was resized: so is its pseudo-terminal.  (The program
// gets the SIGWINCH itself, from the real terminal, as under python.)
void copy_window_size(int) {
    const int saved = errno;
    for (auto& pair : g_winch_pairs) {
        struct winsize ws {};
        if (pair[0] >= 0 && ioctl(pair[0], TIOCGWINSZ, &ws) == 0) {
            ioctl(pair[1], TIOCSWINSZ, &ws);
        }
    }
    errno = saved;
}

// A pseudo-terminal like the real terminal `real` (its modes and size), but with
// output processing off: the program's bytes reach the real terminal, which does
// its own (\n -> \r\n), unchanged, and the log gets them as written.
bool open_pty_like(int real, int* master, int* slave) {
    *master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (*master < 0) return false;
    char name[128];
    if (grantpt(*master) != 0 || unlockpt(*master) != 0 || ptsname_r(*master, name, sizeof name) != 0 ||
        (*slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0) {
        close(*master);
        return false;
    }
    struct termios modes {};
    if (tcgetattr(real, &modes) == 0) {
        modes.c_oflag &= ~static_cast<tcflag_t>(OPOST);
        tcsetattr(*slave, TCSANOW, &modes);
    }
    struct winsize ws {};
    if (ioctl(real, TIOCGWINSZ, &ws) == 0) {
        ioctl(*slave, TIOCSWINSZ, &ws);
    }
    return true;
}

}  // namespace

OutputTee::OutputTee(const std::filesystem::path& log) {
    try {
        // O_NOFOLLOW, O_NONBLOCK, checked ours on the descriptor, 0600 (store_trust.hpp).
        log_fd_ = open_store_file(log, O_WRONLY | O_CREAT | O_APPEND);
    } catch (const JobError& e) {
        log::say("store", e.what());  // the program runs, its output not kept
        log_fd_ = -1;
    }
    if (log_fd_ < 0) {
        return;
    }
    // Each stream: a pipe if it is a file or a pipe, a pseudo-terminal if it is a
    // terminal (so that the program still sees one: isatty, its size, line
    // buffering), nothing if it is closed.  Two streams on the same file, pipe or
    // terminal share one, so that their order is kept.
    struct stat out {}, err {};
    const bool open_out = fstat(1, &out) == 0, open_err = fstat(2, &err) == 0;
    const bool tty_out = open_out && isatty(1), tty_err = open_err && isatty(2);
    auto add_pipe = [&](std::vector<int> targets, int destination) {
        int ends[2];
        if (pipe2(ends, O_CLOEXEC) != 0) return;
        pipes_.push_back(Pipe{ends[0], ends[1], std::move(targets), destination, true});
    };
    auto add_pty = [&](std::vector<int> targets, int destination) {
        int master = -1, slave = -1;
        if (!open_pty_like(destination, &master, &slave)) return;
        for (auto& pair : g_winch_pairs) {
            if (pair[0] < 0) {
                pair[1] = master;
                pair[0] = destination;
                break;
            }
        }
        pipes_.push_back(Pipe{master, slave, std::move(targets), destination, true});
    };
    const bool same = open_out && open_err && out.st_dev == err.st_dev && out.st_ino == err.st_ino &&
                      out.st_rdev == err.st_rdev;
    if (same) {
        tty_out ? add_pty({1, 2}, 1) : add_pipe({1, 2}, 1);
    } else {
        if (open_out) tty_out ? add_pty({1}, 1) : add_pipe({1}, 1);
        if (open_err) tty_err ? add_pty({2}, 2) : add_pipe({2}, 2);
    }
    if (tty_out || tty_err) {
        struct sigaction sa {};
        sa.sa_handler = copy_window_size;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGWINCH, &sa, nullptr);
    }
}

OutputTee::~OutputTee() {
    for (auto& pair : g_winch_pairs) {
        pair[0] = -1;
        pair[1] = -1;
    }
    for (Pipe& p : pipes_) {
        if (p.read_end >= 0) close(p.read_end);
        if (p.write_end >= 0) close(p.write_end);
    }
    if (log_fd_ >= 0) close(log_fd_);
}

void OutputTee::attach_child() {
    for (Pipe& p : pipes_) {
        for (int target : p.targets) {
            dup2(p.write_end, target);  // dup2 clears close-on-exec on the copy
        }
    }
}

void OutputTee::attach_parent() {
    for (Pipe& p : pipes_) {
        close(p.write_end);
        p.write_end = -1;
    }
}

std::vector<int> OutputTee::fds() const {
    std::vector<int> fds;
    for (const Pipe& p : pipes_) {
        if (p.open) fds.push_back(p.read_end);
    }
    return fds;
}

bool OutputTee::relays(int fd) const {
    for (const Pipe& p : pipes_) {
        for (int target : p.targets) {
            if (target == fd) return true;
        }
    }
    return false;
}

std::string OutputTee::unmarked(Pipe& p, const char* buf, std::size_t n) {
    constexpr std::size_t kMarkSize = sizeof kLineMark - 1;
    std::string out;
    out.reserve(n + 1);
    for (std::size_t i = 0; i < n; ++i) {
        const char c = buf[i];
        if (c == kLineMark[p.marked]) {
            if (++p.marked == kMarkSize) {  // the mark: a newline if the line is unfinished
                p.marked = 0;
                if (p.last != '\n') out.push_back('\n');
                p.last = '\n';
            }
            continue;
        }
        if (p.marked > 0) {  // not the mark after all: what was kept back goes on
            out.append(kLineMark, p.marked);
            p.last = kLineMark[p.marked - 1];
            p.marked = 0;
            if (c == kLineMark[0]) {
                p.marked = 1;
                continue;
            }
        }
        out.push_back(c);
        p.last = c;
    }
    return out;
}

bool OutputTee::pass_on(Pipe& p, const std::string& out) {
    if (out.empty()) return true;
    if (log_fd_ >= 0) write_all(log_fd_, out.data(), out.size());
    return write_all(p.destination, out.data(), out.size());
}

OutputTee::Copied OutputTee::copy_once(Pipe& p) {
    char buf[65536];
    ssize_t n;
    do {
        n = read(p.read_end, buf, sizeof buf);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && errno == EAGAIN) {
        return Copied::Nothing;
    }
    if (n <= 0) {  // EOF; or EIO: a pseudo-terminal whose program side is closed
        pass_on(p, std::string(kLineMark, p.marked));  // the start of a mark that never came
        p.marked = 0;
        p.open = false;
        return Copied::Finished;
    }
    if (!pass_on(p, unmarked(p, buf, static_cast<std::size_t>(n)))) {
        // The reader went away (`| head`): the program must see EPIPE on its next
        // write, as it would have without Portal.
        close(p.read_end);
        p.read_end = -1;
        p.open = false;
        return Copied::Finished;
    }
    return Copied::Some;
}

bool OutputTee::pump(int fd) {
    for (Pipe& p : pipes_) {
        if (p.read_end == fd && p.open) {
            return copy_once(p) != Copied::Finished;
        }
    }
    return false;
}

void OutputTee::drain() {
    for (Pipe& p : pipes_) {
        if (!p.open) continue;
        fcntl(p.read_end, F_SETFL, fcntl(p.read_end, F_GETFL) | O_NONBLOCK);
        // Until EOF, or EAGAIN: only writers we do not wait for are left.
        while (copy_once(p) == Copied::Some) {
        }
    }
}

std::uint64_t OutputTee::log_size() const {
    struct stat st {};
    return log_fd_ >= 0 && fstat(log_fd_, &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
}

}  // namespace portal
