// gc.cpp: see include/portal/gc.hpp.
#include "portal/gc.hpp"

#include <iostream>
#include <system_error>

#include "portal/expiry.hpp"
#include "portal/job_lock.hpp"
#include "portal/job_recovery.hpp"
#include "portal/log.hpp"
#include "portal/remove_job.hpp"
#include "portal/size.hpp"

namespace fs = std::filesystem;

namespace portal {


bool has_checkpoint_files(const Job& job) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(job.dir, ec)) {
        if (is_checkpoint_entry(entry.path().filename().string())) return true;
    }
    return false;
}

std::vector<GcAction> plan_gc(const std::vector<JobView>& views, std::time_t now,
                              std::optional<std::time_t> older_than_seconds) {
    std::vector<GcAction> plan;
    for (const JobView& v : views) {
        if (v.holder || !v.problem.empty()) {
            continue;  // in use, or a record to look at (portal show), not to guess about
        }
        if (v.state == "suspended") {
            const std::time_t due = expires_at(v.record);
            if (due >= 0 && due <= now) plan.push_back({GcKind::Expire, v.job, v.state});
            continue;
        }
        if (!is_ended(v.state)) {
            continue;
        }
        const std::time_t updated = parse_utc_iso(v.record.value("updated", ""));
        if (older_than_seconds && updated >= 0 && updated <= now - *older_than_seconds) {
            plan.push_back({GcKind::Remove, v.job, v.state});
        } else if (v.state != "lost" && has_checkpoint_files(v.job)) {
            plan.push_back({GcKind::Clean, v.job, v.state});
        }
    }
    return plan;
}

int portal_gc(const GcRequest& request) {
    const std::time_t now = std::time(nullptr);
    std::optional<std::time_t> older;
    if (request.older_than_days) {
        older = static_cast<std::time_t>(*request.older_than_days * 86400.0);
    }
    if (!request.dry_run) {
        // Leftovers of interrupted writers, and checkpoints their record missed,
        // first: a recovered job is suspended, not a failed one to clean.
        for (const Job& job : list_jobs(portal_home())) repair_job(job);
    }
    const std::vector<GcAction> plan = plan_gc(view_jobs(portal_home()), now, older);
    std::vector<std::vector<std::string>> rows;
    std::uintmax_t total = 0;
    int status = kCliOk;
    for (const GcAction& action : plan) {
        std::uintmax_t freed = 0;
        std::string verb, what;
        try {
            switch (action.kind) {
                case GcKind::Expire: {
                    verb = request.dry_run ? "would expire" : "expired";
                    what = "checkpoint kept 3 days, deleted";
                    const std::uintmax_t before = bytes_under(action.job.dir);
                    if (request.dry_run) {
                        freed = before;
                    } else if (!expire_if_due(action.job, now)) {
                        continue;  // resumed or taken meanwhile
                    } else {
                        const std::uintmax_t after = bytes_under(action.job.dir);
                        freed = before > after ? before - after : 0;
                    }
                    break;
                }
                case GcKind::Clean:
                    verb = request.dry_run ? "would clean" : "cleaned";
                    what = "checkpoint of a " + action.state + " job";
                    if (request.dry_run) {
                        freed = checkpoint_bytes(action.job);
                    } else {
                        // The lock, so that a resume cannot start on it meanwhile.
                        JobLock lock = JobLock::acquire(action.job, "portal gc");
                        freed = remove_checkpoint(action.job);
                    }
                    break;
                case GcKind::Remove:
                    verb = request.dry_run ? "would remove" : "removed";
                    what = action.state + " job, last changed " +
                           short_time(view_job(action.job).record, "updated");
                    freed = request.dry_run ? bytes_under(action.job.dir)
                                            : remove_job(action.job, "portal gc").freed;
                    break;
            }
        } catch (const JobError& e) {
            log::say("gc", printable(e.what()));
            status = kCliRefused;
            continue;
        } catch (const fs::filesystem_error& e) {
            log::say("gc", printable("job " + action.job.id + ": " + e.what()));
            status = kCliRefused;
            continue;
        }
        total += freed;
        rows.push_back({verb, printable(action.job.id), printable(what), format_size(freed)});
    }
    if (rows.empty()) {
        std::cout << "nothing to free\n";
        return status;
    }
    std::cout << format_table(rows);
    std::cout << (request.dry_run ? "would free " : "freed ") << format_size(total) << " in " << rows.size()
              << (rows.size() == 1 ? " job\n" : " jobs\n");
    return status;
}

}  // namespace portal
