// job_store.cpp: see include/portal/job_store.hpp.
#include "portal/job_store.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <pwd.h>
#include <sstream>
#include <unistd.h>

namespace fs = std::filesystem;

namespace portal {

fs::path portal_home() {
    if (const char* env = std::getenv("PORTAL_HOME"); env && *env) {
        return env;
    }
    const char* home = std::getenv("HOME");
    if (!home || !*home) {
        const passwd* pw = getpwuid(getuid());
        home = pw ? pw->pw_dir : "/";
    }
    return fs::path(home) / ".portal";
}

nlohmann::json Job::read_record() const {
    std::ifstream in(record_path());
    if (!in) {
        throw JobError("job " + id + ": cannot read " + record_path().string() + ": " + std::strerror(errno));
    }
    try {
        return nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        throw JobError("job " + id + ": " + record_path().string() + " is not valid json: " + e.what());
    }
}

void Job::write_record(const nlohmann::json& record) const {
    const fs::path tmp = record_path().string() + ".tmp" + std::to_string(getpid());
    const std::string text = record.dump(2) + "\n";
    const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        throw JobError("job " + id + ": cannot write " + tmp.string() + ": " + std::strerror(errno));
    }
    const char* p = text.data();
    std::size_t left = text.size();
    while (left > 0) {
        const ssize_t n = write(fd, p, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const int err = errno;
            close(fd);
            unlink(tmp.c_str());
            throw JobError("job " + id + ": cannot write " + tmp.string() + ": " + std::strerror(err));
        }
        p += n;
        left -= static_cast<std::size_t>(n);
    }
    fsync(fd);
    close(fd);
    if (rename(tmp.c_str(), record_path().c_str()) != 0) {
        const int err = errno;
        unlink(tmp.c_str());
        throw JobError("job " + id + ": cannot replace " + record_path().string() + ": " + std::strerror(err));
    }
}

void Job::update_record(const nlohmann::json& fields) const {
    nlohmann::json record = read_record();
    record.update(fields);
    write_record(record);
}

std::vector<Job> list_jobs(const fs::path& home) {
    std::vector<Job> jobs;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(home / "jobs", ec)) {
        if (entry.is_directory(ec)) {
            jobs.push_back(Job{entry.path().filename().string(), entry.path()});
        }
    }
    std::sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) { return a.id < b.id; });
    return jobs;
}

Job find_job(const fs::path& home, const std::string& id_or_prefix) {
    if (id_or_prefix.empty() || id_or_prefix.find('/') != std::string::npos) {
        throw JobError("'" + id_or_prefix + "' is not a job id (see portal list)");
    }
    std::vector<Job> matches;
    for (Job& job : list_jobs(home)) {
        if (job.id == id_or_prefix) {
            return job;
        }
        if (job.id.rfind(id_or_prefix, 0) == 0) {
            matches.push_back(job);
        }
    }
    if (matches.size() == 1) {
        return matches.front();
    }
    if (matches.empty()) {
        throw JobError("no job '" + id_or_prefix + "' in " + (home / "jobs").string());
    }
    std::ostringstream names;
    for (std::size_t i = 0; i < matches.size(); ++i) {
        names << (i ? ", " : "") << matches[i].id;
    }
    throw JobError("'" + id_or_prefix + "' matches several jobs: " + names.str() + " (give more of the id)");
}

}  // namespace portal
