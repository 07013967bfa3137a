// expiry.hpp: a suspended job's checkpoint is kept 3 days (kExpirySeconds), then
// deleted.  `portal gc` expires every job that is due; any other `portal`
// command expires the jobs it touches on the way.  The job's record stays, with
// state "expired" and when, so that a late `portal resume` can say what happened.
#pragma once

#include <cstdint>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include "portal/job_store.hpp"

namespace portal {

// When a suspended job's checkpoint expires (from the record's expires_at), or -1.
std::time_t expires_at(const nlohmann::json& record);

// Expires `job` if it is suspended and due at `now`: the record first says
// "expired" (so that no resume starts on a checkpoint being deleted), then the
// checkpoint goes, both under the job's lock (taken without waiting).  A job
// another process holds is left alone.  True if it expired.
bool expire_if_due(const Job& job, std::time_t now);

// repair_job (job_recovery.hpp) and expire_if_due over the whole store; the ids
// of the jobs expired.
std::vector<std::string> expire_due_jobs(const std::filesystem::path& home, std::time_t now);

// Whether a name in a job directory is part of its checkpoint: `checkpoint`,
// `checkpoint.<G>`, `.checkpoint.tmp-*`, `.checkpoint.link-*`
// (docs/checkpoint-format.md); the rest is the record, the lock and the log.
bool is_checkpoint_entry(const std::string& name);

// The bytes of the job's checkpoint files, leftovers of interrupted writers included.
std::uintmax_t checkpoint_bytes(const Job& job);

// Deletes the job's checkpoint: the link, its generations, and what interrupted
// writers left.  Returns the bytes freed.
std::uintmax_t remove_checkpoint(const Job& job);

}  // namespace portal
