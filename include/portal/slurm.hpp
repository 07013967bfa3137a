// slurm.hpp: what portal-run and `portal` share about Slurm (docs/slurm.md).
//
//   - run_command: runs a Slurm client (sbatch, squeue, sacct, scontrol) by its argv,
//     never through a shell, and gives back its status and output;
//   - requeue_key: which Portal job a Slurm batch job owns, from SLURM_CLUSTER_NAME,
//     SLURM_JOB_ID and SLURM_ARRAY_JOB_ID/SLURM_ARRAY_TASK_ID (the same across the
//     Slurm job's requeues);
//   - find_requeued_job: the Portal job recorded with that key;
//   - requeue_if_preempted: after a run that a preemption suspended, asks Slurm to
//     requeue the batch job (`scontrol requeue $SLURM_JOB_ID`), so that it starts
//     again and resumes the Portal job (portal-run --requeue).
//
// The record keeps it all in one optional field, "slurm" (contract/job_record.json):
//   {"requeue_key": "...", "job_id": "...", "restart_count": N}       portal-run --requeue
//   {"job_id": "...", "partition": "...", "output": PATH, "submitted": UTC, "command": [...]}
//                                                                      portal resume --on slurm
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "portal/job_store.hpp"

namespace portal::slurm {

// The record field that holds everything Slurm (see above).
constexpr const char* kRecordField = "slurm";
// How long one Slurm client command may take before it is killed: squeue and
// sbatch wait up to MessageTimeout (10 s by default) for slurmctld, twice.
constexpr int kClientTimeoutSeconds = 30;
// What a command that could not be started (not installed) exits with, as a shell would.
constexpr int kNotFound = 127;

struct CommandResult {
    int status = -1;         // the exit status; kNotFound when it could not start; -1: killed
    std::string out, err;    // what it wrote (stderr trimmed of its last newline)
    bool timed_out = false;
};

// Runs `argv` (argv[0] looked up on PATH) with `input` on its stdin, no shell.
CommandResult run_command(const std::vector<std::string>& argv, const std::string& input = "",
                          int timeout_seconds = kClientTimeoutSeconds);

// True when `name` is an executable file in one of PATH's directories.
bool installed(const std::string& name);

// The key of the Slurm batch job this process runs in, or nullopt outside one
// (no SLURM_JOB_ID): "CLUSTER/JOBID" or "CLUSTER/ARRAYJOBID_TASKID".
std::optional<std::string> requeue_key();

// The newest job of the store at `home` recorded with `key` (records that cannot
// be read or are not ours are passed over).
std::optional<Job> find_requeued_job(const std::filesystem::path& home, const std::string& key);

// True when the record says its last suspension was a preemption: the reason
// "preempted" (issue 13 item 2: SIGTERM or --preempt-signal), in the record's
// "reason" or "error" field or its last run's.
bool suspended_by_preemption(const nlohmann::json& record);

// After a run of `job` that ended with `exit_code`: when it was suspended by a
// preemption and this process runs inside a Slurm batch job, records the requeue
// and runs `scontrol requeue $SLURM_JOB_ID` (Slurm then kills what is left of
// this job and starts it again, SLURM_RESTART_COUNT one higher).  Says what it
// did, or why it could not, in one line.
void requeue_if_preempted(const Job& job, int exit_code);

// `text` single-quoted for /bin/sh ('it'\''s'): the batch scripts Portal writes
// quote every word so.
std::string shell_quote(const std::string& text);

}  // namespace portal::slurm
