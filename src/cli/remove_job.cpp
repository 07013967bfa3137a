// remove_job.cpp: see include/portal/remove_job.hpp.
#include "portal/remove_job.hpp"

#include <system_error>

#include "portal/job_lock.hpp"
#include "portal/store_trust.hpp"
#include "portal/size.hpp"

namespace fs = std::filesystem;

namespace portal {

std::string RemoveResult::freed_text() const { return format_size(freed); }

std::uintmax_t bytes_under(const fs::path& dir) {
    std::uintmax_t total = 0;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
        if (it->is_regular_file(ec) && !it->is_symlink(ec)) total += it->file_size(ec);
    }
    return total;
}

RemoveResult remove_job(const Job& job, const std::string& command) {
    open_private_dir(job.dir);  // another user's or a symlink: StoreUntrusted, nothing removed
    RemoveResult result;
    result.freed = bytes_under(job.dir);  // before our lock writes who we are
    // A job another process runs throws JobBusy here; holding the lock ourselves,
    // a record that still says running is a lost job.
    JobLock lock = JobLock::acquire(job, command);
    try {
        result.state = effective_state(job.read_record(), false);
    } catch (const JobError&) {
        result.state = "unreadable";
    }
    std::error_code ec;
    fs::remove_all(job.dir, ec);
    if (ec) {
        throw JobError("job " + job.id + ": cannot remove " + job.dir.string() + ": " + ec.message());
    }
    return result;
}

}  // namespace portal
