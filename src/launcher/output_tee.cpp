// output_tee.cpp: see include/portal/output_tee.hpp.
#include "portal/output_tee.hpp"

#include <cerrno>
#include <fcntl.h>
#include <string>
#include <sys/stat.h>
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

// A stream worth passing through: open, and not a terminal.
bool keepable(int fd, struct stat* st) {
    return fstat(fd, st) == 0 && !isatty(fd);
}

}  // namespace

OutputTee::OutputTee(const std::filesystem::path& log) {
    log_fd_ = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (log_fd_ < 0) {
        return;
    }
    struct stat out {}, err {};
    const bool keep_out = keepable(1, &out);
    const bool keep_err = keepable(2, &err);
    auto add = [&](std::vector<int> targets, int destination) {
        int ends[2];
        if (pipe2(ends, O_CLOEXEC) != 0) return;
        pipes_.push_back(Pipe{ends[0], ends[1], std::move(targets), destination, true});
    };
    const bool same = keep_out && keep_err && out.st_dev == err.st_dev && out.st_ino == err.st_ino;
    if (same) {
        add({1, 2}, 1);
    } else {
        if (keep_out) add({1}, 1);
        if (keep_err) add({2}, 2);
    }
}

OutputTee::~OutputTee() {
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

bool OutputTee::pump(int fd) {
    for (Pipe& p : pipes_) {
        if (p.read_end != fd || !p.open) continue;
        char buf[65536];
        ssize_t n;
        do {
            n = read(fd, buf, sizeof buf);
        } while (n < 0 && errno == EINTR);
        if (n < 0 && errno == EAGAIN) {
            return true;
        }
        if (n <= 0) {
            p.open = false;
            return false;
        }
        if (log_fd_ >= 0) write_all(log_fd_, buf, static_cast<std::size_t>(n));
        if (!write_all(p.destination, buf, static_cast<std::size_t>(n))) {
            // The reader went away (`| head`): the program must see EPIPE on its
            // next write, as it would have without Portal.
            close(p.read_end);
            p.read_end = -1;
            p.open = false;
            return false;
        }
        return true;
    }
    return false;
}

void OutputTee::drain() {
    for (Pipe& p : pipes_) {
        if (!p.open) continue;
        fcntl(p.read_end, F_SETFL, fcntl(p.read_end, F_GETFL) | O_NONBLOCK);
        char buf[65536];
        for (;;) {
            ssize_t n;
            do {
                n = read(p.read_end, buf, sizeof buf);
            } while (n < 0 && errno == EINTR);
            if (n <= 0) {
                break;  // EOF, or EAGAIN: only writers we do not wait for are left
            }
            if (log_fd_ >= 0) write_all(log_fd_, buf, static_cast<std::size_t>(n));
            if (!write_all(p.destination, buf, static_cast<std::size_t>(n))) {
                break;
            }
        }
    }
}

std::uint64_t OutputTee::log_size() const {
    struct stat st {};
    return log_fd_ >= 0 && fstat(log_fd_, &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
}

}  // namespace portal
