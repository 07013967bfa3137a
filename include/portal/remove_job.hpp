// remove_job.hpp: deleting a whole job directory safely, shared by `portal rm`
// and `portal gc --older-than`.
#pragma once

#include <cstdint>
#include <string>

#include "portal/job_store.hpp"

namespace portal {

struct RemoveResult {
    std::string state;         // the job's effective state before it went
    std::uintmax_t freed = 0;  // bytes of the files removed
    std::string freed_text() const;
};

// Takes the job's lock first (throws JobBusy naming the process that runs it),
// so that no `portal resume` can start on it while its files go, then removes
// the directory.  `command` is what a concurrent command is told holds it.
RemoveResult remove_job(const Job& job, const std::string& command);

// The bytes of the regular files under `dir` (links not followed).
std::uintmax_t bytes_under(const std::filesystem::path& dir);

}  // namespace portal
