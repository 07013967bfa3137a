// job_store.hpp: the job store as the `portal` CLI sees it.
//
//   $PORTAL_HOME (default ~/.portal)/jobs/<JOB>/job.json    the job record
//   $PORTAL_HOME (default ~/.portal)/jobs/<JOB>/checkpoint  the current checkpoint
//
// The interpreter process (python/_portal/jobs.py) creates a job when it first
// suspends; the CLI finds it, resumes it and records how the run ended.
#pragma once

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace portal {

struct JobError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

std::filesystem::path portal_home();

struct Job {
    std::string id;
    std::filesystem::path dir;

    std::filesystem::path record_path() const { return dir / "job.json"; }
    std::filesystem::path checkpoint_path() const { return dir / "checkpoint"; }
    nlohmann::json read_record() const;
    // Writes the record atomically (temporary file, fsync, rename), mode 0600.
    void write_record(const nlohmann::json& record) const;
    void update_record(const nlohmann::json& fields) const;
};

// The job whose id is `id_or_prefix`, or the only one it is a prefix of.
// Throws JobError naming the candidates when it is ambiguous or unknown.
Job find_job(const std::filesystem::path& home, const std::string& id_or_prefix);

std::vector<Job> list_jobs(const std::filesystem::path& home);

}  // namespace portal
