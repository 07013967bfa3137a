// job_view.hpp: a job as the `portal` commands show it, and the formatting they
// share (times, durations, sizes, tables), kept apart from the commands so that
// the unit tests can check it without a job store.
#pragma once

#include <ctime>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "portal/job_store.hpp"

namespace portal {

// Exit statuses of the `portal` commands other than run and resume's own.
constexpr int kCliOk = 0;
constexpr int kCliRefused = 1;  // a refused action, an unknown job, a damaged record
constexpr int kCliUsage = 2;    // a malformed command line

struct JobView {
    Job job;
    nlohmann::json record;              // empty object when it could not be read
    std::string state;                  // effective_state(), "unreadable" or "refused"
    std::optional<std::string> holder;  // who holds job.lock, if anyone
    std::string problem;                // why the record could not be read or is refused (whole message)
    std::string reason = {};            // the same, short: "owned by uid 1001", "field 'state' is null, ..."
    bool recovered = false;             // suspended by its checkpoint, not by its record (job_recovery.hpp)
};

// Reads the job's record and who holds it; never throws: a job directory (or
// its job.lock) that is not ours is "refused" with the reason, a damaged record
// "unreadable", and a lost or failed job with a newer committed checkpoint of
// its own is "suspended", recovered.
JobView view_job(const Job& job);
// The state as list and show print it: "refused (owned by uid 1001)",
// "unreadable (not UTF-8 text)", "suspended (recovered from its checkpoint)".
std::string state_text(const JobView& view);

// `text` with every control character (C0, DEL, C1) shown as \xNN, so that a
// record or a file name cannot drive the terminal; everything printed from a
// record or a name goes through it.
std::string printable(const std::string& text);

// Every job of the store, newest first (by the record's creation time, then id).
std::vector<JobView> view_jobs(const std::filesystem::path& home);

// The record as the CLI shows it (`--json`): its fields, with "state" the
// effective state ("lost" for a running job nobody holds), "recorded_state" when
// that differs, and "held_by".
nlohmann::json view_json(const JobView& view);

// A non-negative integer field of a JSON object (a size, an offset), or nullopt.
std::optional<std::uint64_t> json_uint(const nlohmann::json& object, const char* key);

// Ended: nothing will run it again (completed, failed, expired, lost).
bool is_ended(const std::string& state);

// "2026-11-29 12:00 UTC" from a record's ISO time; "-" when absent or unreadable.
std::string short_time(const nlohmann::json& record, const char* key);
// "2d 23h", "5h 02m", "12m", "45s" for a span of seconds (negative: as 0).
std::string format_duration(std::time_t seconds);
// How long a suspended job's checkpoint is still kept at `now`: "2d 23h",
// "due" (to be expired by the next command), or "-" when not suspended.
std::string expires_in(const nlohmann::json& record, const std::string& state, std::time_t now);
// "train.py:12 (4)": the loop's file name and line, and the iteration that runs
// again; "-" when the record has no loop.
std::string loop_and_iteration(const nlohmann::json& record);
// What the job runs, as a command: "train.py --epochs 3", "-m pkg.mod", "-c '...'".
std::string program_text(const nlohmann::json& record, bool full_path);
// The memory to suggest for `portal resume --mem`, in GiB: as the suspension
// report, twice the memory tripwire's cap of the last run (from its --mem, else
// this machine's memory); the record's suggested_mem_gib when it has one.
std::uint64_t suggested_mem_gib(const nlohmann::json& record);

// Rows as left-aligned columns two spaces apart, the last column unpadded.
std::string format_table(const std::vector<std::vector<std::string>>& rows);

// Runs expire_due_jobs on the store, quietly: every `portal` command does, so
// that a checkpoint past its 3 days goes even without `portal gc`.
void expire_opportunistically();

}  // namespace portal
