// job_store.cpp: see include/portal/job_store.hpp.
#include "portal/job_store.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <random>
#include <sys/file.h>
#include <sys/stat.h>
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

void make_private_dir(const fs::path& path) {
    if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
        throw JobError("cannot create " + path.string() + ": " + std::strerror(errno));
    }
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        throw JobError(path.string() + " is not a directory");
    }
    if (st.st_uid != geteuid()) {
        throw JobError(path.string() + " belongs to another user: Portal keeps jobs only in a directory of yours");
    }
    if ((st.st_mode & 0777) != 0700 && chmod(path.c_str(), 0700) != 0) {
        throw JobError("cannot make " + path.string() + " private (0700): " + std::strerror(errno));
    }
}

nlohmann::json Job::read_record() const {
    std::ifstream in(record_path());
    if (!in) {
        throw JobError("job " + id + ": cannot read " + record_path().string() + ": " + std::strerror(errno));
    }
    nlohmann::json record;
    try {
        record = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        throw JobError("job " + id + ": " + record_path().string() + " is not valid json: " + e.what());
    }
    if (!record.is_object()) {
        throw JobError("job " + id + ": " + record_path().string() + " is not a job record");
    }
    const auto version = record.value("record_version", kRecordVersion);
    if (version > kRecordVersion) {
        throw JobError("job " + id + ": its record is version " + std::to_string(version) +
                       ", newer than this portal reads (" + std::to_string(kRecordVersion) +
                       "): use the portal that made it");
    }
    return record;
}

void Job::write_record(const nlohmann::json& record, bool durable) const {
    const fs::path tmp = record_path().string() + ".tmp" + std::to_string(getpid());
    // Replace, not throw, on bytes that are not UTF-8 (an argv of raw bytes).
    const std::string text = record.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        throw JobError("job " + id + ": cannot write " + tmp.string() + ": " + std::strerror(errno));
    }
    fchmod(fd, 0600);  // 0600 whatever the umask
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
    if (durable) {
        fsync(fd);
    }
    close(fd);
    if (rename(tmp.c_str(), record_path().c_str()) != 0) {
        const int err = errno;
        unlink(tmp.c_str());
        throw JobError("job " + id + ": cannot replace " + record_path().string() + ": " + std::strerror(err));
    }
}

nlohmann::json Job::modify_record(const std::function<void(nlohmann::json&)>& change) const {
    // The lock is on the job's directory itself: no file to create for it.
    const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        throw JobError("job " + id + ": cannot open " + dir.string() + ": " + std::strerror(errno));
    }
    while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {
    }
    try {
        nlohmann::json record = read_record();
        const nlohmann::json before = record;
        change(record);
        if (record != before) {  // a look that changes nothing writes nothing
            record["updated"] = utc_iso(std::time(nullptr));
            write_record(record, false);
        }
        close(fd);
        return record;
    } catch (...) {
        close(fd);
        throw;
    }
}

nlohmann::json Job::update_record(const nlohmann::json& fields) const {
    return modify_record([&](nlohmann::json& record) { record.update(fields); });
}

Job create_job(const fs::path& home, const std::string& stem, nlohmann::json record) {
    make_private_dir(home);
    make_private_dir(home / "jobs");
    std::string clean;
    for (char c : stem.substr(0, 32)) {
        const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
        clean += ok ? c : '_';
    }
    if (clean.empty()) clean = "job";
    std::random_device random;
    for (int attempt = 0; attempt < 100; ++attempt) {
        char hex[7];
        std::snprintf(hex, sizeof hex, "%06x", random() & 0xffffffu);
        Job job{clean + "-" + hex, home / "jobs" / (clean + "-" + hex)};
        if (mkdir(job.dir.c_str(), 0700) != 0) {
            if (errno == EEXIST) continue;
            throw JobError("cannot create " + job.dir.string() + ": " + std::strerror(errno));
        }
        chmod(job.dir.c_str(), 0700);
        record["record_version"] = kRecordVersion;
        record["id"] = job.id;
        record["created"] = record["updated"] = utc_iso(std::time(nullptr));
        job.write_record(record, false);
        return job;
    }
    throw JobError("cannot find a free job id under " + (home / "jobs").string());
}

std::string utc_iso(std::time_t t) {
    std::tm tm {};
    gmtime_r(&t, &tm);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return text;
}

std::time_t parse_utc_iso(const std::string& text) {
    std::tm tm {};
    const char* end = strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
    if (end == nullptr) {
        return -1;
    }
    return timegm(&tm);
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
