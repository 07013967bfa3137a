// job_lock.hpp: one process runs a job at a time.
//
// The process that runs a job (portal-run's supervisor, or `portal resume`'s)
// holds an exclusive flock(2) on jobs/<JOB>/job.lock for as long as the program
// runs, and writes who it is into the file.  The kernel drops the lock when that
// process dies however it dies (SIGKILL, a reboot), so a record that still says
// "running" with nobody holding the lock is a job that was lost.  The descriptor
// is close-on-exec: the program itself does not hold it.
#pragma once

#include <optional>
#include <string>

#include "portal/job_store.hpp"

namespace portal {

struct JobBusy : JobError {
    using JobError::JobError;
};

class JobLock {
public:
    // Takes the lock without waiting, or throws JobBusy naming the holder.
    // `command` (e.g. "portal resume train-3f9a2c") is written for others to read.
    static JobLock acquire(const Job& job, const std::string& command);
    JobLock(JobLock&& other) noexcept;
    JobLock& operator=(JobLock&&) = delete;
    JobLock(const JobLock&) = delete;
    ~JobLock();

private:
    explicit JobLock(int fd) : fd_(fd) {}
    int fd_ = -1;
};

// Who holds the job's lock ("pid 4242, portal resume train-3f9a2c, since
// 2026-11-29T12:00:00Z"), or nullopt when nobody does.
std::optional<std::string> lock_holder(const Job& job);

// The state to show: the record's, except that a job recorded as running whose
// lock nobody holds is "lost" (its supervisor was killed, or the machine rebooted).
std::string effective_state(const nlohmann::json& record, bool lock_held);

}  // namespace portal
