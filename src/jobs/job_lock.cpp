// job_lock.cpp: see include/portal/job_lock.hpp.
#include "portal/job_lock.hpp"

#include "portal/store_trust.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <string>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace portal {

namespace {

constexpr mode_t kLockMode = 0600;
// What a holder writes is one line; a bigger file is not Portal's, and is not read whole.
constexpr std::size_t kHolderTextMax = 4096;

std::string read_holder(int fd) {
    std::string text;
    char buf[512];
    ssize_t n;
    while (text.size() < kHolderTextMax &&
           (n = pread(fd, buf, sizeof buf, static_cast<off_t>(text.size()))) > 0) {
        text.append(buf, static_cast<std::size_t>(n));
    }
    text.resize(std::min(text.size(), kHolderTextMax));
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    // Printed in others' messages: no terminal control characters.
    for (char& c : text) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    }
    return text;
}


void write_holder(int fd, const std::string& who) {
    if (ftruncate(fd, 0) != 0 || pwrite(fd, who.data(), who.size(), 0) < 0) {
        // The lock is what matters; the text is only for messages.
    }
}

}  // namespace

JobLock JobLock::acquire(const Job& job, const std::string& command) {
    const int fd = open_store_file(job.lock_path(), O_RDWR | O_CREAT);  // no symlink, FIFO, other's file
    if (fd < 0) {
        throw JobError("job " + job.id + ": cannot open " + job.lock_path().string() + ": " + std::strerror(errno));
    }
    fchmod(fd, kLockMode);  // whatever the umask: the next holder must open it for writing
    int rc;
    while ((rc = flock(fd, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
    }
    if (rc != 0) {
        const std::string holder = read_holder(fd);
        close(fd);
        throw JobBusy("job " + job.id + " is in use by " + (holder.empty() ? "another process" : holder));
    }
    // Who holds it, for the message another command gives: only the holder writes.
    std::string who = "pid " + std::to_string(getpid()) + ", " + command + ", since " + utc_iso(std::time(nullptr));
    write_holder(fd, who + "\n");
    return JobLock(fd, std::move(who));
}

void JobLock::name_program(pid_t pid) {
    if (fd_ >= 0) write_holder(fd_, who_ + "; program pid " + std::to_string(pid) + "\n");
}

JobLock::JobLock(JobLock&& other) noexcept : fd_(other.fd_), who_(std::move(other.who_)) { other.fd_ = -1; }

JobLock::~JobLock() {
    if (fd_ >= 0) {
        // Emptied first, so that a reader never names a holder that is gone.
        if (ftruncate(fd_, 0) != 0) {
        }
        close(fd_);
    }
}

std::optional<std::string> lock_holder(const Job& job) {
    const int fd = open_store_file(job.lock_path(), O_RDONLY);  // throws StoreUntrusted for a planted one
    if (fd < 0) {
        return std::nullopt;  // never run under a lock, so nobody holds it
    }
    int rc;
    while ((rc = flock(fd, LOCK_SH | LOCK_NB)) != 0 && errno == EINTR) {
    }
    if (rc == 0) {
        close(fd);
        return std::nullopt;
    }
    std::string holder = read_holder(fd);
    close(fd);
    return holder.empty() ? std::string("another process") : holder;
}

std::string effective_state(const nlohmann::json& record, bool lock_held) {
    std::string state = record.value("state", "unknown");
    if (state == "running" && !lock_held) {
        return "lost";
    }
    return state;
}

}  // namespace portal
