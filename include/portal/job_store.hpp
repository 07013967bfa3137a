// job_store.hpp: the job store, shared by portal-run, `portal` and (in Python)
// python/_portal/store/jobs.py.  Layout and record fields: docs/job-store.md.
//
//   $PORTAL_HOME (default ~/.portal)/            0700
//     jobs/<JOB>/                                0700, JOB = <script stem>-<6 hex>;
//                   flock(2)ed around every read-modify-write of job.json
//       job.json      the job record (JSON), replaced atomically, 0600
//       job.lock      flock(2)ed by the process running the job (job_lock.hpp)
//       output.log    the program's stdout and stderr, all runs (output_tee.hpp)
//       checkpoint    the current checkpoint (docs/checkpoint-format.md)
#pragma once

#include <ctime>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "portal/job_contract.hpp"  // generated from contract/job_record.json

namespace portal {

struct JobError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// The version of job.json's layout this build writes; readers refuse a newer one.
constexpr int kRecordVersion = contract::kRecordVersion;
// A suspended job's checkpoint is kept this long, then deleted (expiry).
constexpr std::time_t kExpirySeconds = contract::kExpirySeconds;
// A job.json larger than this is refused unread ("unreadable (larger than ...)").
constexpr std::size_t kRecordMaxBytes = contract::kRecordMaxBytes;

// $PORTAL_HOME made absolute (relative to the working directory now), else ~/.portal.
// Check it with trust_store (store_trust.hpp) before use.
std::filesystem::path portal_home();

// Creates `path` 0700 whatever the umask, and refuses one that exists but is not
// a directory of ours that only we can reach (a checkpoint is code); see
// make_checked_dir in store_trust.hpp, which this is.
void make_private_dir(const std::filesystem::path& path);

// Parses and checks a record's text against the contract: UTF-8 JSON, an
// object, nesting within bounds, every known field of its type ("state" a
// string, "runs" an array of objects...), a known state, a version we read.
// Throws JobError with the reason ("field 'state' is null, not a string").
// Never anything else: this is what the fuzzer (tests/fuzz) drives.
nlohmann::json parse_record(const std::string& text);

struct Job {
    std::string id;
    std::filesystem::path dir;

    std::filesystem::path record_path() const { return dir / "job.json"; }
    std::filesystem::path checkpoint_path() const { return dir / "checkpoint"; }
    std::filesystem::path lock_path() const { return dir / "job.lock"; }
    std::filesystem::path log_path() const { return dir / "output.log"; }
    nlohmann::json read_record() const;
    // Writes the record atomically (temporary file, rename), mode 0600; `durable`
    // fsyncs it first.  The supervisor's own records are not durable: an fsync
    // costs milliseconds at every start, and a record lost with the machine only
    // loses a "running" or an ending; the suspension the interpreter records is.
    void write_record(const nlohmann::json& record, bool durable = true) const;
    // Read-modify-write under an flock of the job's directory, so that the
    // supervisor and the interpreter process (which records a suspension) never
    // lose each other's fields.  Returns the record as written.
    nlohmann::json modify_record(const std::function<void(nlohmann::json&)>& change) const;
    nlohmann::json update_record(const nlohmann::json& fields) const;
};

// A new job directory under home/jobs with a fresh id made from `stem` (the
// script's name), and its first record.
Job create_job(const std::filesystem::path& home, const std::string& stem, nlohmann::json record);

// The job whose id is `id_or_prefix`, or the only one it is a prefix of.
// Throws JobError naming the candidates when it is ambiguous or unknown.
Job find_job(const std::filesystem::path& home, const std::string& id_or_prefix);

std::vector<Job> list_jobs(const std::filesystem::path& home);

// "2026-11-29T12:00:00Z" (UTC) and back; parse gives -1 for text it cannot read.
std::string utc_iso(std::time_t t);
std::time_t parse_utc_iso(const std::string& text);

}  // namespace portal
