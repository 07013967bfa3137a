// slurm_status.hpp: the state of the Slurm job a Portal job records (docs/slurm.md),
// for `portal show` and `portal logs -f`.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace portal {

// The Slurm job id recorded in `record`'s "slurm" field, when it is one (digits,
// optionally _TASK); a record's text is never handed to a command otherwise.
std::optional<std::string> recorded_slurm_job(const nlohmann::json& record);

// The Slurm job's state as squeue gives it (PENDING, RUNNING, COMPLETED, ... with
// `squeue -t all`), else as sacct does (accounting), else "unknown (...)" saying
// why.  Never throws.
std::string slurm_job_state(const std::string& slurm_job);

// True for a state in which the Slurm job may still write output.
bool slurm_job_active(const std::string& state);

}  // namespace portal
