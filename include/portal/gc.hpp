// gc.hpp: `portal gc [--older-than DAYS] [--dry-run]`: frees the job store.
//
//   - a suspended job past its expiry (3 days) is expired: its checkpoint is
//     deleted, its record stays, saying when (expiry.hpp);
//   - a completed, failed or expired job's checkpoint leftovers are deleted
//     (nothing can resume them);
//   - with --older-than DAYS, ended jobs (completed, failed, expired, lost)
//     whose record last changed more than DAYS days ago are removed whole.
// A job some process holds is never touched.  A lost job's checkpoint is kept
// unless the job itself goes: it is the last state that job reached.
#pragma once

#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "portal/job_view.hpp"

namespace portal {

struct GcRequest {
    std::optional<double> older_than_days;
    bool dry_run = false;
};

int portal_gc(const GcRequest& request);

enum class GcKind { Expire, Clean, Remove };

struct GcAction {
    GcKind kind;
    Job job;
    std::string state;  // the job's effective state when planned
};

// What gc does to `views` at `now`: at most one action a job.
std::vector<GcAction> plan_gc(const std::vector<JobView>& views, std::time_t now,
                              std::optional<std::time_t> older_than_seconds);

// True when the job's directory holds a checkpoint or what a writer left of one.
bool has_checkpoint_files(const Job& job);

}  // namespace portal
