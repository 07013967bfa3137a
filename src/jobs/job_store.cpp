// job_store.cpp: see include/portal/job_store.hpp.
#include "portal/job_store.hpp"

#include "portal/store_trust.hpp"

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
#include "portal/job_contract.hpp"  // generated: the environment variables' names

namespace fs = std::filesystem;

namespace portal {

namespace {

// Deeper than any record Portal writes (runs[i].command[j] is 3 levels).
constexpr int kRecordMaxDepth = 32;

const char* type_word(const nlohmann::json& v) {
    if (v.is_null()) return "null";
    if (v.is_boolean()) return "a boolean";
    if (v.is_number_integer()) return "an integer";
    if (v.is_number()) return "a number";
    if (v.is_string()) return "a string";
    if (v.is_array()) return "an array";
    if (v.is_object()) return "an object";
    return "not JSON";
}

std::string wanted_words(unsigned types) {
    static const std::pair<unsigned, const char*> names[] = {
        {contract::kString, "a string"},   {contract::kInteger, "an integer"}, {contract::kArray, "an array"},
        {contract::kObject, "an object"},  {contract::kNull, "null"},          {contract::kBoolean, "a boolean"},
        {contract::kNumber, "a number"}};
    std::string out;
    for (const auto& [bit, word] : names) {
        if (types & bit) out += (out.empty() ? "" : " or ") + std::string(word);
    }
    return out;
}

bool has_type(const nlohmann::json& v, unsigned types) {
    return ((types & contract::kString) && v.is_string()) ||
           ((types & contract::kInteger) && v.is_number_integer()) ||
           ((types & contract::kArray) && v.is_array()) || ((types & contract::kObject) && v.is_object()) ||
           ((types & contract::kNull) && v.is_null()) || ((types & contract::kBoolean) && v.is_boolean()) ||
           ((types & contract::kNumber) && v.is_number());
}

template <std::size_t N>
void check_fields(const nlohmann::json& object, const contract::Field (&fields)[N], const std::string& where) {
    for (const contract::Field& f : fields) {
        const auto it = object.find(f.name);
        if (it != object.end() && !has_type(*it, f.types)) {
            throw JobError("field '" + where + f.name + "' is " + type_word(*it) + ", not " + wanted_words(f.types));
        }
    }
}

}  // namespace

fs::path portal_home() {
    std::error_code ec;
    if (const char* env = std::getenv(::portal::contract::env::kHome); env && *env) {
        // Absolute now: a program that chdir()s must not move the store.
        fs::path abs = fs::absolute(env, ec).lexically_normal();
        if (ec) return env;
        if (abs.has_relative_path() && abs.filename().empty()) abs = abs.parent_path();  // "a/b/" -> "a/b"
        return abs;
    }
    const char* home = std::getenv("HOME");
    if (!home || !*home) {
        const passwd* pw = getpwuid(getuid());
        home = pw ? pw->pw_dir : "/";
    }
    return fs::absolute(fs::path(home) / ".portal", ec).lexically_normal();
}

void make_private_dir(const fs::path& path) { make_checked_dir(path); }

nlohmann::json parse_record(const std::string& text) {
    if (text.size() > kRecordMaxBytes) {
        throw JobError("larger than " + std::to_string(kRecordMaxBytes) + " bytes");
    }
    nlohmann::json record;
    try {
        // The callback bounds the nesting before anything deeper is built.
        record = nlohmann::json::parse(text, [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
            if (depth > kRecordMaxDepth) throw JobError("nested deeper than " + std::to_string(kRecordMaxDepth));
            return true;
        });
    } catch (const nlohmann::json::exception& e) {
        std::string why = e.what();
        if (why.find("UTF-8") != std::string::npos) throw JobError("not UTF-8 text");
        if (why.find("number overflow") != std::string::npos) throw JobError("not valid json (a number too large)");
        throw JobError("not valid json (" + why.substr(why.find(']') == std::string::npos ? 0 : why.find(']') + 2) + ")");
    }
    if (!record.is_object()) {
        throw JobError(std::string("not a job record (") + type_word(record) + ", not an object)");
    }
    check_fields(record, contract::kFields, "");
    const auto version = record.find("record_version");
    if (version != record.end() && version->get<std::int64_t>() > kRecordVersion) {
        throw JobError("its record is version " + std::to_string(version->get<std::int64_t>()) +
                       ", newer than this portal reads (" + std::to_string(kRecordVersion) +
                       "): use the portal that made it");
    }
    if (const auto state = record.find("state"); state != record.end()) {
        bool known = false;
        for (const char* s : contract::kStates) known = known || *state == s;
        if (!known) throw JobError("field 'state' is not a state Portal writes");
    }
    if (const auto program = record.find("program"); program != record.end()) {
        check_fields(*program, contract::kProgramFields, "program.");
    }
    if (const auto runs = record.find("runs"); runs != record.end()) {
        for (std::size_t i = 0; i < runs->size(); ++i) {
            const nlohmann::json& run = (*runs)[i];
            const std::string where = "runs[" + std::to_string(i) + "].";
            if (!run.is_object()) {
                throw JobError("field '" + where.substr(0, where.size() - 1) + "' is " + type_word(run) +
                               ", not an object");
            }
            check_fields(run, contract::kRunFields, where);
        }
    }
    return record;
}

nlohmann::json Job::read_record() const {
    open_private_dir(dir);  // the job's directory first: another user's is refused unread
    try {
        return parse_record(read_store_file(record_path(), kRecordMaxBytes));
    } catch (const StoreUntrusted&) {
        throw;
    } catch (const JobError& e) {
        const std::string why = e.what();
        const std::string path = record_path().string() + ": ";
        // read_store_file names the path itself; parse_record does not.
        throw JobError("job " + id + ": " + (why.rfind(path, 0) == 0 ? why : path + why));
    }
}

void Job::write_record(const nlohmann::json& record, bool durable) const {
    // Replace, not throw, on bytes that are not UTF-8 (an argv of raw bytes).
    const std::string text = record.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    try {
        write_file_atomically(record_path(), text, durable);
    } catch (const JobError& e) {
        throw JobError("job " + id + ": " + e.what());
    }
}

nlohmann::json Job::modify_record(const std::function<void(nlohmann::json&)>& change) const {
    // The lock is on the job's directory itself, opened and checked as ours.
    const CheckedDir checked = open_private_dir(dir);
    const int fd = checked.fd();
    while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {
    }
    {
        // Every writer of job.json (this one, python/_portal/store/jobs.py) holds this
        // flock while its temporary file exists: one seen now is an interrupted
        // writer's, never to be renamed in.
        std::error_code ec;
        for (const auto& entry : fs::directory_iterator(dir, ec)) {
            if (is_record_temp(entry.path().filename().string())) unlinkat(fd, entry.path().filename().c_str(), 0);
        }
    }
    {
        nlohmann::json record = read_record();
        const nlohmann::json before = record;
        change(record);
        if (record != before) {  // a look that changes nothing writes nothing
            record["updated"] = utc_iso(std::time(nullptr));
            write_record(record, false);
        }
        return record;  // the flock goes with the descriptor
    }
}

nlohmann::json Job::update_record(const nlohmann::json& fields) const {
    return modify_record([&](nlohmann::json& record) { record.update(fields); });
}

Job create_job(const fs::path& home, const std::string& stem, nlohmann::json record) {
    const CheckedDir store = trust_store(home, StoreUse::Create);
    make_private_dir(store.path() / "jobs");
    // Never a leading '-': an id is an operand of portal's commands and of the
    // printed ones (`-x.py` was job `-x-eac71a`, which `portal show` read as an option).
    const std::size_t first = stem.find_first_not_of('-');
    std::string clean;
    for (char c : stem.substr(first == std::string::npos ? stem.size() : first, contract::kIdStemMax)) {
        const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
        clean += ok ? c : '_';
    }
    if (clean.empty()) clean = "job";
    std::random_device random;
    for (int attempt = 0; attempt < 100; ++attempt) {
        char hex[contract::kIdHexDigits + 1];
        std::snprintf(hex, sizeof hex, "%0*x", contract::kIdHexDigits,
                      random() & ((1u << (4 * contract::kIdHexDigits)) - 1));
        Job job{clean + "-" + hex, store.path() / "jobs" / (clean + "-" + hex)};
        if (mkdir(job.dir.c_str(), 0700) != 0) {
            if (errno == EEXIST) continue;
            throw JobError("cannot create " + job.dir.string() + ": " + std::strerror(errno));
        }
        make_private_dir(job.dir);  // checked, and 0700 whatever the umask
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
    if (!fs::exists(fs::symlink_status(home / "jobs", ec))) {
        return jobs;  // nothing run yet
    }
    const CheckedDir checked = open_private_dir(home / "jobs");  // throws StoreUntrusted
    for (const auto& entry : fs::directory_iterator(home / "jobs", ec)) {
        // A symlink is listed too, to be shown refused, never followed.
        const fs::file_type type = entry.symlink_status(ec).type();
        if (type == fs::file_type::directory || type == fs::file_type::symlink) {
            jobs.push_back(Job{entry.path().filename().string(), entry.path()});
        }
    }
    std::sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) { return a.id < b.id; });
    return jobs;
}

Job find_job(const fs::path& home, const std::string& id_or_prefix) {
    // Longer than any id (stem, '-', hex digits): said without echoing all of it.
    const std::size_t longest = contract::kIdStemMax + 1 + contract::kIdHexDigits;
    if (id_or_prefix.size() > longest) {
        throw JobError("'" + id_or_prefix.substr(0, longest) + "...' (" + std::to_string(id_or_prefix.size()) +
                       " characters) is not a job id: an id has at most " + std::to_string(longest) +
                       " (see portal list)");
    }
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
