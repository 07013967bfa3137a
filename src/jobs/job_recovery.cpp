// job_recovery.cpp: see include/portal/job_recovery.hpp.
#include "portal/job_recovery.hpp"

#include <cerrno>
#include <climits>
#include <cctype>
#include <system_error>
#include <unistd.h>

#include "portal/expiry.hpp"
#include "portal/job_lock.hpp"
#include "portal/store_trust.hpp"

namespace fs = std::filesystem;

namespace portal {

namespace {

constexpr const char* kGenerationPrefix = "checkpoint.";
// A manifest nests "runtime" and "frames" a few levels: far below this.
constexpr int kManifestMaxDepth = 64;

// "checkpoint.<digits>", the only target the link may have (a plain name).
bool is_generation_name(const std::string& name) {
    const std::string prefix = kGenerationPrefix;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return false;
    for (std::size_t i = prefix.size(); i < name.size(); ++i) {
        if (!std::isdigit(static_cast<unsigned char>(name[i]))) return false;
    }
    return true;
}

nlohmann::json parse_manifest(const std::string& text) {
    return nlohmann::json::parse(text, [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
        if (depth > kManifestMaxDepth) throw JobError("manifest nested too deep");
        return true;
    });
}

}  // namespace

std::optional<Recovery> recovered_checkpoint(const Job& job, const nlohmann::json& record,
                                             const std::string& effective_state) {
    if (effective_state != "lost" && effective_state != "failed") return std::nullopt;
    try {
        char target[PATH_MAX];
        const ssize_t n = readlink(job.checkpoint_path().c_str(), target, sizeof target - 1);
        if (n <= 0) return std::nullopt;
        const std::string generation(target, static_cast<std::size_t>(n));
        if (!is_generation_name(generation)) return std::nullopt;
        const CheckedDir dir = open_private_dir(job.dir / generation);
        const nlohmann::json manifest =
            parse_manifest(read_store_file(dir.path() / "manifest.json", contract::kManifestMaxBytes));
        if (!manifest.is_object()) return std::nullopt;
        // "job_id" (signed, bound by the resume); "job", the caller field older
        // manifests carry, names the job the same way.
        auto id = manifest.find("job_id");
        if (id == manifest.end()) id = manifest.find("job");
        const auto created = manifest.find("created");
        if (id == manifest.end() || !id->is_string() || *id != job.id) return std::nullopt;
        if (created == manifest.end() || !created->is_string()) return std::nullopt;
        const std::time_t made = parse_utc_iso(created->get<std::string>());
        if (made < 0) return std::nullopt;
        // A failed job: only a checkpoint newer than the last suspension the record
        // knows (to the second, as it keeps them), one the record never heard of
        // (a program that failed after a resume has ended: its last checkpoint is
        // not resumed).  A lost job (its supervisor and program were killed, the
        // machine restarted) is judged from its checkpoint alone: the one a resume
        // started from stays the job's until a newer one is committed.
        const auto last = record.find("suspended_at");
        if (effective_state == "failed" && last != record.end() && last->is_string()) {
            const std::time_t recorded = parse_utc_iso(last->get<std::string>());
            if (recorded >= 0 && made <= recorded) return std::nullopt;
        }
        Recovery recovery{generation, utc_iso(made), nlohmann::json()};
        if (const auto loop = manifest.find("loop"); loop != manifest.end() && loop->is_object()) {
            recovery.loop = *loop;
        }
        return recovery;
    } catch (const std::exception&) {
        return std::nullopt;  // damaged or not ours: nothing to recover from
    }
}

void apply_recovery(nlohmann::json& record, const Recovery& recovery) {
    const std::time_t made = parse_utc_iso(recovery.created);
    record["state"] = "suspended";
    record["suspended_at"] = recovery.created;
    record["expires_at"] = utc_iso(made + kExpirySeconds);
    record["recovered_from"] = recovery.generation;
    record["recovered_at"] = recovery.created;
    const nlohmann::json& loop = recovery.loop;
    if (loop.is_object()) {
        const auto file = loop.find("file");
        const auto line = loop.find("line");
        if (file != loop.end() && file->is_string() && line != loop.end() && line->is_number_integer()) {
            record["loop"] = file->get<std::string>() + ":" + std::to_string(line->get<long long>());
        }
        const auto iteration = loop.find("iteration");
        if (iteration != loop.end() && iteration->is_number_integer()) record["iteration"] = *iteration;
    }
    for (const char* ended : {"ended", "exit_status"}) record.erase(ended);
}

bool is_recovered(const nlohmann::json& record) {
    const auto at = record.find("recovered_at");
    const auto last = record.find("suspended_at");
    return record.value("state", "") == "suspended" && at != record.end() && last != record.end() && *at == *last;
}

bool is_leftover(const std::string& name) {
    return is_record_temp(name) || name.rfind(".checkpoint.tmp-", 0) == 0 || name.rfind(".checkpoint.link-", 0) == 0;
}

bool repair_job(const Job& job) {
    try {
        const nlohmann::json before = job.read_record();
        const auto recovery = recovered_checkpoint(job, before, effective_state(before, false));
        // A resumable job's directory holds only what a resume reads; an ended
        // job's checkpoint files, leftovers included, are `portal gc`'s to clean
        // and report.
        const bool resumable = recovery || before.value("state", "") == "suspended" ||
                               before.value("state", "") == "running";
        const auto is_ours_to_remove = [&](const std::string& name) {
            return is_record_temp(name) || (resumable && is_leftover(name));
        };
        bool leftovers = false;
        std::error_code ec;
        for (const auto& entry : fs::directory_iterator(job.dir, ec)) {
            leftovers = leftovers || is_ours_to_remove(entry.path().filename().string());
        }
        if (!leftovers && !recovery) return false;
        // Nobody runs it (a held lock is a running writer: its files are not leftovers).
        JobLock lock = JobLock::acquire(job, "portal (repairing the job)");
        const CheckedDir dir = open_private_dir(job.dir);
        for (const auto& entry : fs::directory_iterator(job.dir, ec)) {
            if (is_ours_to_remove(entry.path().filename().string())) fs::remove_all(entry.path(), ec);
        }
        bool changed = leftovers;
        job.modify_record([&](nlohmann::json& r) {
            if (const auto again = recovered_checkpoint(job, r, effective_state(r, false))) {
                apply_recovery(r, *again);
                changed = true;
            }
        });
        return changed;
    } catch (const std::exception&) {
        return false;  // busy, damaged or not ours: for the command itself to report
    }
}

}  // namespace portal
