// slurm_requeue.hpp: `portal-run --requeue` (docs/slurm.md, "Requeue").
//
// A Slurm batch job that runs `portal-run --requeue train.py` owns one Portal job,
// found again by its key (slurm.hpp's requeue_key: cluster, job id, array task)
// whenever Slurm starts the batch job again (scontrol requeue, a preemption, a
// node failure: SLURM_RESTART_COUNT > 0).  At each start:
//   - no job with that key yet: the program starts as a new job, recorded with it;
//   - the job is suspended (or lost with a complete checkpoint): this process
//     becomes `portal resume JOB --requeue` (exec, same pid: Slurm's signals reach it);
//   - the job completed: it is not run again (exit 0);
//   - it runs elsewhere: refused (exit 1);
//   - it failed or expired: the program starts anew as a new job, as a batch job
//     without Portal would.
// A run suspended by a preemption then asks Slurm to requeue the batch job
// (slurm::requeue_if_preempted).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "portal/job_store.hpp"

namespace portal {

struct RequeueStart {
    std::optional<int> exit_code;    // set: portal-run exits with it (nothing to run here)
    std::optional<std::string> key;  // set: record it on the new job
};

// `mem`: portal-run's --mem, passed on to the resume; `forwarded`: portal-run's
// options that `portal resume` takes too (--preempt-signal SIG, --preempt-grace S),
// as typed.  Returns only when the program is to start here as a new job, or
// with the exit status when it is not to run; on a resume it does not return.
RequeueStart start_requeued(const std::string& mem, const std::vector<std::string>& forwarded);

// Marks `job` (just created by portal-run) as the one of Slurm job `key`.
void record_requeue_key(const Job& job, const std::string& key);

// The options of portal-run's own command line to pass on to `portal resume`.
std::vector<std::string> resume_forwarded_options(const std::vector<std::string>& portal_args);

}  // namespace portal
