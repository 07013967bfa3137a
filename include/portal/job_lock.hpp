// job_lock.hpp: one job, one running process, always.
//
// The process that runs a job (portal-run's supervisor, or `portal resume`'s)
// holds an exclusive flock(2) on jobs/<JOB>/job.lock, and writes who it is into
// the file.  The lock belongs to the open file description, so every process that
// holds a descriptor of it holds the lock: the supervisor hands a duplicate to the
// interpreter (not close-on-exec, its number in PORTAL_LOCK_FD, see
// supervisor.hpp), and the lock is then held until the supervisor AND the
// interpreter are both gone, however they die (SIGKILL, a reboot).  So a second
// `portal resume`, `rm` or `gc` is refused for as long as the program runs, even
// after its supervisor was SIGKILLed; and a record that still says "running"
// with nobody holding the lock is a job that was lost.
//
// The interpreter's own children do not hold it: the bootstrap marks the
// descriptor close-on-exec (a subprocess never gets it) and closes it in every
// forked child (os.register_at_fork), so a DataLoader worker or a daemon the
// program left behind never keeps a job locked after its interpreter ended
// (docs/security.md, "One job, one process").
//
// job.lock is opened without following a symbolic link and without blocking on a
// FIFO, and checked on the open descriptor (a regular file of yours, one link, not
// writable by group or others) before it is truncated or written.
#pragma once

#include <optional>
#include <string>
#include <sys/types.h>

#include "portal/job_store.hpp"

namespace portal {

struct JobBusy : JobError {
    using JobError::JobError;
};

class JobLock {
public:
    // Takes the lock without waiting, or throws JobBusy naming the holder; throws
    // JobError when job.lock cannot be trusted (a symbolic link, a FIFO, another
    // user's file, writable by others).  `command` (e.g. "portal resume
    // train-3f9a2c") is written for others to read.
    static JobLock acquire(const Job& job, const std::string& command);
    JobLock(JobLock&& other) noexcept;
    JobLock& operator=(JobLock&&) = delete;
    JobLock(const JobLock&) = delete;
    ~JobLock();

    // The descriptor (close-on-exec; the supervisor gives the interpreter its own).
    int fd() const { return fd_; }
    // Adds the program's pid to what the file says, once the interpreter runs:
    // "pid 4242, portal resume train-3f9a2c, since ...; program pid 4243".
    void name_program(pid_t pid);

private:
    JobLock(int fd, std::string who) : fd_(fd), who_(std::move(who)) {}
    int fd_ = -1;
    std::string who_;
};

// Who holds the job's lock ("pid 4242, portal resume train-3f9a2c, since
// 2026-11-29T12:00:00Z; program pid 4243"), or nullopt when nobody does; throws
// StoreUntrusted when job.lock is not a file Portal could have made (a symlink, a
// FIFO, another's: store_trust.hpp), which the job's view shows as refused.
std::optional<std::string> lock_holder(const Job& job);

// The state to show: the record's, except that a job recorded as running whose
// lock nobody holds is "lost" (its supervisor was killed, or the machine rebooted).
std::string effective_state(const nlohmann::json& record, bool lock_held);

}  // namespace portal
