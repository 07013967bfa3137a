// resume.hpp: `portal resume JOB [--mem SIZE] [--gpu TYPE] [--on SPEC]`.
// With --on slurm[:PARTITION] the resume is submitted to Slurm instead (slurm_submit.hpp).
//
// Continues a suspended job in the foreground, with the program's own output and
// exit status (75 again if it is suspended again).  The stages, in order:
//   1. find the job (a unique prefix of its id is enough) and check it is suspended;
//   2. check this machine is what was asked for (--mem, --gpu, --on); a refusal
//      leaves the job suspended, intact;
//   3. start the interpreter on the checkpoint and wait (supervisor);
//   4. record how the run ended in the job record.
#pragma once

#include <string>
#include <vector>

namespace portal {

struct ResumeRequest {
    std::string job;
    std::string mem;  // empty: no requirement
    std::string gpu;  // empty: no requirement
    std::string on = "local";
    std::vector<std::string> policies;  // none: the job's own, as recorded
    std::string device_map;             // "0:1,1:0": saved CUDA device -> this machine's
    std::string time;                   // --on slurm: sbatch --time (empty: the partition's default)
    std::string account;                // --on slurm: sbatch --account
    bool requeue = false;               // started by portal-run --requeue (slurm_requeue.hpp)
    std::string preempt_signal;         // preemption (preempt.hpp): besides SIGTERM
    double preempt_grace = -1;          // seconds; negative: preempt::kDefaultGraceSeconds
};

int portal_resume(const ResumeRequest& request);

}  // namespace portal
