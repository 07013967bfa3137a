// expiry.cpp: see include/portal/expiry.hpp.
#include "portal/expiry.hpp"

#include <cctype>

#include "portal/job_lock.hpp"
#include "portal/job_recovery.hpp"
#include <optional>

namespace fs = std::filesystem;

namespace portal {

bool is_checkpoint_entry(const std::string& name) {
    if (name == "checkpoint" || name.rfind(".checkpoint.tmp-", 0) == 0 || name.rfind(".checkpoint.link-", 0) == 0) {
        return true;
    }
    const std::string prefix = "checkpoint.";
    if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size()) {
        return false;
    }
    for (std::size_t i = prefix.size(); i < name.size(); ++i) {
        if (!std::isdigit(static_cast<unsigned char>(name[i]))) return false;
    }
    return true;
}

std::uintmax_t checkpoint_bytes(const Job& job) {
    std::uintmax_t total = 0;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(job.dir, ec)) {
        if (!is_checkpoint_entry(entry.path().filename().string()) || entry.is_symlink(ec)) continue;
        if (!entry.is_directory(ec)) {
            total += entry.file_size(ec);
            continue;
        }
        for (const auto& f : fs::recursive_directory_iterator(entry.path(), ec)) {
            if (f.is_regular_file(ec)) total += f.file_size(ec);
        }
    }
    return total;
}

std::time_t expires_at(const nlohmann::json& record) {
    const auto it = record.find("expires_at");
    return it != record.end() && it->is_string() ? parse_utc_iso(it->get<std::string>()) : -1;
}

std::uintmax_t remove_checkpoint(const Job& job) {
    const std::uintmax_t freed = checkpoint_bytes(job);
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(job.dir, ec)) {
        if (is_checkpoint_entry(entry.path().filename().string())) {
            fs::remove_all(entry.path(), ec);
        }
    }
    return freed;
}

bool expire_if_due(const Job& job, std::time_t now) {
    const auto due_in = [&](const nlohmann::json& r) {
        const std::time_t due = expires_at(r);
        return r.value("state", "") == "suspended" && due >= 0 && due <= now;
    };
    if (!due_in(job.read_record())) {
        return false;  // the common case: no lock taken, nothing written
    }
    // Only under the job's lock, taken without waiting: a job whose lock is held
    // is running (a resume started on it), and its checkpoint is not ours to delete.
    std::optional<JobLock> lock;
    try {
        lock.emplace(JobLock::acquire(job, "portal (expiring the job)"));
    } catch (const JobBusy&) {
        return false;
    }
    bool expired = false;
    job.modify_record([&](nlohmann::json& r) {
        if (due_in(r)) {
            r["state"] = "expired";
            r["expired_at"] = utc_iso(expires_at(r));
            expired = true;
        }
    });
    if (expired) {
        remove_checkpoint(job);
    }
    return expired;
}

std::vector<std::string> expire_due_jobs(const fs::path& home, std::time_t now) {
    std::vector<std::string> ids;
    for (const Job& job : list_jobs(home)) {
        try {
            repair_job(job);  // leftovers of interrupted writers; a checkpoint the record missed
            if (expire_if_due(job, now)) ids.push_back(job.id);
        } catch (const JobError&) {
            // A damaged record is for `portal show` to report, not for expiry.
        }
    }
    return ids;
}

}  // namespace portal
