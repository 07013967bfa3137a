// job_recovery.hpp: nothing reported suspended is ever lost.
//
// The checkpoint is the source of truth.  A kill right at the commit, or a full
// disk at the record write, can leave a sound checkpoint behind a record that
// says running, lost or failed; and an interrupted writer leaves temporary files
// (job.json.tmp*, .checkpoint.tmp-*, .checkpoint.link-*).  The next command that
// touches the job repairs both, under the job's lock (a job whose lock is held
// is running: left alone).  The signature is checked by the resume itself
// (python/_portal/checkpoint/format.py); here only the manifest's job_id and time are
// read, with the same size-capped O_NOFOLLOW reader as the record.
#pragma once

#include <optional>
#include <string>

#include "portal/job_store.hpp"

namespace portal {

struct Recovery {
    std::string generation;  // "checkpoint.3": what the `checkpoint` link names
    std::string created;     // the manifest's "created" (UTC, ISO)
    nlohmann::json loop;     // the manifest's "loop" object, when it has one
};

// The committed checkpoint a job resumes from although its record does not say
// suspended: the `checkpoint` link names `checkpoint.<G>` whose manifest.json
// says "job_id" == job.id, while the record (by `effective_state`) says lost (any
// such checkpoint: the one a resume started from, or a newer one) or failed (only
// one created after the record's last suspension).  nullopt otherwise, and for
// anything damaged or not ours.
std::optional<Recovery> recovered_checkpoint(const Job& job, const nlohmann::json& record,
                                             const std::string& effective_state);

// `record` as a suspended job of that checkpoint: state, suspended_at,
// expires_at (its 3 days from the checkpoint), recovered_from, recovered_at.
void apply_recovery(nlohmann::json& record, const Recovery& recovery);

// Whether the record says it is suspended thanks to apply_recovery (shown
// "suspended (recovered from its checkpoint)").
bool is_recovered(const nlohmann::json& record);

// Leftovers of interrupted writers in the job's directory, by name.
bool is_leftover(const std::string& name);

// Under the job's lock, taken without waiting (nothing done when it is held):
// removes record temps, and checkpoint leftovers of a resumable job (those of an
// ended job are `portal gc`'s to clean and report), and records a recovered
// checkpoint.  Never throws for a
// damaged job (that is for `portal show` to report).  True if it changed anything.
bool repair_job(const Job& job);

}  // namespace portal
