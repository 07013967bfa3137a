// interpreter_probe.cpp: see include/portal/interpreter_probe.hpp.
#include "portal/interpreter_probe.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "portal/log.hpp"
#include "portal/store_trust.hpp"

#ifndef PORTAL_SUPPORTED_PYTHONS
#error "PORTAL_SUPPORTED_PYTHONS must be defined by the build (src/CMakeLists.txt), e.g. \"3.11\""
#endif

namespace fs = std::filesystem;

namespace portal {

namespace {

// The probe's first field; bumped when the fields change (a cache of another
// version is never used).
constexpr const char* kProbeTag = "portal-probe-3";
constexpr std::size_t kProbeFields = 10;
// More than any interpreter's answer; a longer one is not a Python's.
constexpr std::size_t kProbeMaxBytes = 64 * 1024;
constexpr std::size_t kCacheMaxBytes = 64 * 1024;
constexpr const char* kShebang = "#!";
// Runs on any Python from 2.7 on (a too-old one is named, not crashed on): prints
// the fields NUL-separated, as bytes (paths need not be UTF-8).  Its first act
// takes the working directory ('' that -c put first) off sys.path: nothing it
// imports is looked for there.
constexpr const char* kProbeCode = R"(import sys
if sys.path[:1]==['']:del sys.path[0]
import os
try:
    from importlib.machinery import EXTENSION_SUFFIXES as x
except Exception:
    x=['']
try:
    m=sys.modules['importlib._bootstrap_external'].MAGIC_NUMBER[:2].hex()
except Exception:
    m=''
i=getattr(sys,'implementation',None)
f=['portal-probe-3','%d.%d.%d'%tuple(sys.version_info[:3]),i.name if i else 'cpython',x[0] if x else '',
   sys.executable,getattr(sys,'_base_executable',sys.executable),sys.prefix,getattr(sys,'base_prefix',sys.prefix),
   sys.version.replace('\n',' '),m]
e=getattr(os,'fsencode',None)
getattr(sys.stdout,'buffer',sys.stdout).write(b'\0'.join([e(a) if e else a for a in f]))
)";
// The native modules each interpreter needs, built per version (src/CMakeLists.txt).
constexpr std::array<const char*, 2> kNativeModules = {"_frames", "_toplevel"};
constexpr const char* kExtPrefix = "_frames.cpython-";

std::vector<std::string> split(const std::string& text, char sep) {
    std::vector<std::string> out;
    std::size_t start = 0;
    while (true) {
        const std::size_t end = text.find(sep, start);
        out.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
        if (end == std::string::npos) return out;
        start = end + 1;
    }
}

// Runs `path -c PROBE` with stdin /dev/null and returns its stdout.  Not -S:
// CPython 3.11 sets a venv's sys.prefix in site.py (site.venv()), and the probe
// must see what the program will.
std::string run_probe(const std::string& path) {
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
        throw ProbeFailed(path + ": cannot start it (pipe: " + std::string(strerror(errno)) + ")");
    }
    const pid_t pid = fork();
    if (pid < 0) {
        close(pipe_fds[0]);
        close(pipe_fds[1]);
        throw ProbeFailed(path + ": cannot start it (fork: " + std::string(strerror(errno)) + ")");
    }
    if (pid == 0) {
        const int null_fd = open("/dev/null", O_RDONLY);
        if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
        dup2(pipe_fds[1], STDOUT_FILENO);
        // From / rather than the working directory: python's -c runner puts it
        // first on sys.path, and CPython 3.13's imports linecache from there before
        // the probe's first line can drop it (a planted linecache.py would run).
        // The probe asks nothing of the working directory.
        if (!path.empty() && path[0] == '/' && chdir("/") != 0) _exit(127);
        const char* argv[] = {path.c_str(), "-c", kProbeCode, nullptr};
        execv(path.c_str(), const_cast<char* const*>(argv));
        _exit(127);
    }
    close(pipe_fds[1]);
    std::string out;
    std::array<char, 4096> buf{};
    while (true) {
        const ssize_t n = read(pipe_fds[0], buf.data(), buf.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (out.size() < kProbeMaxBytes) out.append(buf.data(), static_cast<std::size_t>(n));
    }
    close(pipe_fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        const std::string how = WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                                  : "killed by signal " + std::to_string(WTERMSIG(status));
        throw ProbeFailed(path + " does not run as a Python interpreter (asked for its version: " + how +
                          "); choose another with --python PATH or PORTAL_PYTHON");
    }
    return out;
}

bool is_script(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::array<char, 2> head{};
    in.read(head.data(), head.size());
    return in.gcount() == 2 && head[0] == kShebang[0] && head[1] == kShebang[1];
}

std::string real_path_of(const std::string& path) {
    std::array<char, PATH_MAX> buf{};
    return realpath(path.c_str(), buf.data()) ? std::string(buf.data()) : std::string();
}

// The stat of `path` that changes when the file is replaced or edited ("-" if none).
std::string stat_key(const std::string& path, bool follow) {
    struct stat st {};
    if ((follow ? stat(path.c_str(), &st) : lstat(path.c_str(), &st)) != 0) return "-";
    std::ostringstream out;
    out << st.st_dev << ":" << st.st_ino << ":" << st.st_size << ":" << st.st_mtim.tv_sec << "." << st.st_mtim.tv_nsec
        << ":" << st.st_ctim.tv_sec << "." << st.st_ctim.tv_nsec;
    return out.str();
}

// Everything the probe's answer for a binary depends on: the chosen path and what
// it points to, the pyvenv.cfg CPython looks for beside it and one level up, and
// the two variables that move sys.prefix / sys.executable.
std::string cache_key(const std::string& chosen) {
    const fs::path bin = fs::path(chosen).parent_path();
    std::string key = std::string(kProbeTag) + "\n" + chosen + "\n" + stat_key(chosen, false) + "\n" +
                      stat_key(chosen, true) + "\n" + stat_key((bin / "pyvenv.cfg").string(), true) + "\n" +
                      stat_key((bin.parent_path() / "pyvenv.cfg").string(), true);
    for (const char* name : {"PYTHONHOME", "PYTHONEXECUTABLE"}) {
        const char* value = std::getenv(name);
        key += std::string("\n") + name + "=" + (value ? value : "");
    }
    return key;
}

// FNV-1a, 64 bits: a file name for the key (the key itself is in the file and compared).
std::string key_name(const std::string& key) {
    constexpr std::uint64_t kOffset = 14695981039346656037ULL;
    constexpr std::uint64_t kPrime = 1099511628211ULL;
    std::uint64_t h = kOffset;
    for (unsigned char c : key) {
        h = (h ^ c) * kPrime;
    }
    char name[32];
    std::snprintf(name, sizeof name, "%016llx.json", static_cast<unsigned long long>(h));
    return name;
}

const std::array<std::pair<const char*, std::string Interpreter::*>, 10> kProbed = {{
    {"version", &Interpreter::version},
    {"implementation", &Interpreter::implementation},
    {"ext_suffix", &Interpreter::ext_suffix},
    {"executable", &Interpreter::executable},
    {"base_executable", &Interpreter::base_executable},
    {"prefix", &Interpreter::prefix},
    {"base_prefix", &Interpreter::base_prefix},
    {"build", &Interpreter::build},
    {"real_path", &Interpreter::real_path},
    {"pyc_magic", &Interpreter::pyc_magic},
}};

std::optional<Interpreter> read_cache(const fs::path& file, const std::string& key) {
    try {
        const nlohmann::json j = nlohmann::json::parse(read_store_file(file, kCacheMaxBytes));
        if (!j.is_object() || j.value("key", "") != key || !j.contains("probe") || !j["probe"].is_object()) {
            return std::nullopt;
        }
        Interpreter python;
        for (const auto& [name, member] : kProbed) {
            const auto it = j["probe"].find(name);
            if (it == j["probe"].end() || !it->is_string()) return std::nullopt;
            python.*member = it->get<std::string>();
        }
        return python;
    } catch (const std::exception& e) {
        // Missing, refused or malformed: probed again (and rewritten if ours).
        log::debug("python", "interpreter cache " + file.string() + " not used: " + e.what());
        return std::nullopt;
    }
}

void write_cache(const fs::path& file, const std::string& key, const Interpreter& python) {
    nlohmann::json probe = nlohmann::json::object();
    for (const auto& [name, member] : kProbed) probe[name] = python.*member;
    try {
        write_file_atomically(file, nlohmann::json{{"key", key}, {"probe", probe}}.dump(
                                        -1, ' ', false, nlohmann::json::error_handler_t::replace),
                              false);
    } catch (const std::exception& e) {
        log::debug("python", "interpreter cache " + file.string() + " not written: " + e.what());
    }
}

Interpreter ask(const std::string& path) {
    // From the tag on: a .pth file or sitecustomize may have printed before it.
    const std::string out = run_probe(path);
    const std::size_t tag = out.rfind(kProbeTag);
    const std::vector<std::string> f = split(tag == std::string::npos ? out : out.substr(tag), '\0');
    if (f.size() != kProbeFields || f[0] != kProbeTag) {
        throw ProbeFailed(path + " does not answer as a Python interpreter; choose another with "
                          "--python PATH or PORTAL_PYTHON");
    }
    Interpreter python;
    python.version = f[1];
    python.implementation = f[2];
    python.ext_suffix = f[3];
    python.executable = f[4];
    python.base_executable = f[5];
    python.prefix = f[6];
    python.base_prefix = f[7];
    python.build = f[8];
    python.pyc_magic = f[9];
    return python;
}

std::string joined(const std::vector<std::string>& words, const char* sep) {
    std::string out;
    for (const auto& w : words) out += (out.empty() ? "" : sep) + w;
    return out.empty() ? "none" : out;
}

std::string implementation_name(const std::string& impl) {
    return impl == "cpython" ? "CPython" : impl;
}

bool is_venv(const Interpreter& python) { return !python.prefix.empty() && python.prefix != python.base_prefix; }

}  // namespace

std::string venv_fingerprint(const Interpreter& python) {
    if (!is_venv(python)) return "";
    const std::string cfg = (fs::path(python.prefix) / "pyvenv.cfg").string();
    const std::string link = file_fingerprint(python.path, false);
    return "pyvenv.cfg " + (file_fingerprint(cfg).empty() ? std::string("missing") : file_fingerprint(cfg)) + "; " +
           python.path + " " + (link.empty() ? std::string("missing") : link);
}

namespace {

}  // namespace

std::string file_fingerprint(const std::string& path, bool follow) {
    struct stat st {};
    if (path.empty() || (follow ? stat(path.c_str(), &st) : lstat(path.c_str(), &st)) != 0) return "";
    std::ostringstream out;
    out << "size " << st.st_size << ", modified " << st.st_mtim.tv_sec << "." << st.st_mtim.tv_nsec << ", inode "
        << st.st_ino;
    return out.str();
}

Interpreter probe_interpreter(const InterpreterChoice& choice, const std::optional<fs::path>& cache_dir) {
    const bool shim = is_script(choice.path);
    std::optional<Interpreter> cached;
    std::string key;
    fs::path file;
    if (!shim && cache_dir) {
        key = cache_key(choice.path);
        file = *cache_dir / key_name(key);
        cached = read_cache(file, key);
    }
    Interpreter python = cached ? *cached : ask(choice.path);
    python.chosen = choice.path;
    python.source = source_name(choice.source);
    python.path = choice.path;
    if (shim) {
        // The real interpreter the shim ran (it reported its own sys.executable).
        if (python.executable.empty() || python.executable[0] != '/' || access(python.executable.c_str(), X_OK) != 0) {
            throw ProbeFailed(choice.path + " is a script that runs a Python whose sys.executable (" +
                              python.executable + ") cannot be run itself; give the interpreter's own path "
                              "with --python PATH or PORTAL_PYTHON");
        }
        python.path = python.executable;
    }
    if (!cached) {
        python.real_path = real_path_of(python.path);
        if (!shim && cache_dir) write_cache(file, key, python);
    }
    python.fingerprint = file_fingerprint(python.real_path);
    python.venv_fingerprint = venv_fingerprint(python);
    return python;
}

std::optional<std::string> untrusted_reason(const Interpreter& python) {
    const bool venv = is_venv(python);
    const fs::path prefix = venv ? fs::path(python.prefix) : fs::path();
    std::vector<fs::path> checked{python.path, python.real_path};
    std::error_code ec;
    const fs::path real_now = fs::canonical(python.path, ec);   // what the path runs now
    if (!ec && real_now != fs::path(python.real_path)) checked.push_back(real_now);
    if (venv) {
        checked.push_back(prefix / "pyvenv.cfg");
        // Where site reads the venv's .pth files: lib/pythonX.Y/site-packages.
        for (const char* lib : {"lib", "lib64"}) {
            const fs::path site = prefix / lib / ("python" + major_minor(python.version)) / "site-packages";
            std::error_code ec;
            if (fs::exists(fs::symlink_status(site, ec))) checked.push_back(site);
        }
    }
    for (const auto& path : checked) {
        if (path.empty()) continue;
        std::string why = others_could_change(path, prefix);
        if (!why.empty()) return why;
    }
    return std::nullopt;
}

std::string major_minor(const std::string& version) {
    const auto parts = split(version, '.');
    return parts.size() >= 2 ? parts[0] + "." + parts[1] : version;
}

std::vector<std::string> supported_versions() { return split(PORTAL_SUPPORTED_PYTHONS, ','); }

std::vector<std::string> built_versions(const std::string& package_dir) {
    std::vector<std::string> versions;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(fs::path(package_dir) / "_portal", ec)) {
        const std::string name = entry.path().filename().string();
        const std::string prefix = kExtPrefix;
        if (name.compare(0, prefix.size(), prefix) != 0) continue;
        // _frames.cpython-311-x86_64-linux-gnu.so -> "311" -> "3.11"
        std::size_t end = prefix.size();
        while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
        const std::string digits = name.substr(prefix.size(), end - prefix.size());
        if (digits.size() < 2) continue;
        const std::string version = digits.substr(0, 1) + "." + digits.substr(1);
        if (std::find(versions.begin(), versions.end(), version) == versions.end()) versions.push_back(version);
    }
    std::sort(versions.begin(), versions.end(), [](const std::string& a, const std::string& b) {
        return std::stoi(a.substr(a.find('.') + 1)) < std::stoi(b.substr(b.find('.') + 1));
    });
    return versions;
}

std::optional<std::string> unsupported_reason(const Interpreter& python, const std::string& package_dir) {
    const auto supported = supported_versions();
    const auto built = built_versions(package_dir);
    const std::string which = python.chosen + (python.source == "PATH" ? " (the first python3 on PATH)" : "");
    const std::string choose = "; choose another with --python PATH or PORTAL_PYTHON";
    const std::string mm = major_minor(python.version);
    const std::string lists =
        "Portal supports CPython " + joined(supported, ", ") + " (built here for: " + joined(built, ", ") + ")";
    if (python.implementation != "cpython" ||
        std::find(supported.begin(), supported.end(), mm) == supported.end()) {
        return which + " is " + implementation_name(python.implementation) + " " + python.version + "; " + lists +
               choose;
    }
    for (const char* module : kNativeModules) {
        const fs::path native = fs::path(package_dir) / "_portal" / (std::string(module) + python.ext_suffix);
        std::error_code ec;
        if (python.ext_suffix.empty() || !fs::is_regular_file(native, ec)) {
            return which + " is CPython " + python.version + ", which Portal supports but was not built for here (no " +
                   native.string() + "; " + lists + "): build Portal with it (cmake -DPORTAL_PYTHON=" +
                   python.real_path + ")" + choose;
        }
    }
    return std::nullopt;
}

std::string describe(const Interpreter& python) {
    std::string text = python.path + " (" + implementation_name(python.implementation) + " " + python.version +
                       ", chosen by " + python.source;
    if (python.chosen != python.path) text += " via " + python.chosen;
    return text + ")";
}

nlohmann::json to_record(const Interpreter& python) {
    nlohmann::json j = nlohmann::json::object();
    j["chosen"] = python.chosen;
    j["source"] = python.source;
    j["path"] = python.path;
    j["fingerprint"] = python.fingerprint;
    j["venv_fingerprint"] = python.venv_fingerprint;
    for (const auto& [name, member] : kProbed) j[name] = python.*member;
    return j;
}

std::optional<Interpreter> from_record(const nlohmann::json& record) {
    const auto it = record.find("interpreter");
    if (it == record.end() || !it->is_object()) return std::nullopt;
    Interpreter python;
    const std::array<std::pair<const char*, std::string Interpreter::*>, 4> own = {{
        {"chosen", &Interpreter::chosen}, {"source", &Interpreter::source},
        {"path", &Interpreter::path}, {"fingerprint", &Interpreter::fingerprint}}};
    // Absent from a job recorded before venvs were fingerprinted: not compared.
    const auto venv = it->find("venv_fingerprint");
    if (venv != it->end()) {
        if (!venv->is_string()) return std::nullopt;
        python.venv_fingerprint = venv->get<std::string>();
        python.venv_recorded = true;
    }
    for (const auto& table : {std::vector(own.begin(), own.end()), std::vector(kProbed.begin(), kProbed.end())}) {
        for (const auto& [name, member] : table) {
            const auto field = it->find(name);
            if (field == it->end() && std::string(name) == "pyc_magic") continue;  // optional
            if (field == it->end() || !field->is_string()) return std::nullopt;
            python.*member = field->get<std::string>();
        }
    }
    return python;
}

std::string difference(const Interpreter& recorded, const Interpreter& now) {
    const auto text = [](const Interpreter& p) {
        return implementation_name(p.implementation) + " " + p.version + " at " + p.real_path +
               (p.fingerprint.empty() ? "" : ", " + p.fingerprint) + ", prefix " + p.prefix;
    };
    if (recorded.implementation == now.implementation && recorded.version == now.version &&
        recorded.build == now.build && recorded.real_path == now.real_path &&
        recorded.fingerprint == now.fingerprint && recorded.prefix == now.prefix &&
        recorded.ext_suffix == now.ext_suffix &&
        (!recorded.venv_recorded || recorded.venv_fingerprint == now.venv_fingerprint)) {
        return "";
    }
    if (recorded.venv_fingerprint != now.venv_fingerprint && recorded.venv_recorded &&
        recorded.prefix == now.prefix && recorded.fingerprint == now.fingerprint) {
        return "its virtual environment " + now.prefix + " was re-made or changed since: it ran with " +
               (recorded.venv_fingerprint.empty() ? std::string("none") : recorded.venv_fingerprint) +
               "; it is now " + (now.venv_fingerprint.empty() ? std::string("none") : now.venv_fingerprint);
    }
    return "it ran with " + text(recorded) + "; it is now " + text(now);
}

std::optional<fs::path> interpreter_cache_dir() {
    try {
        const fs::path home = portal_home();
        const CheckedDir store = trust_store(home, StoreUse::Read);
        if (!store.exists()) return std::nullopt;  // no store yet: nothing to cache in
        make_checked_dir(home / "cache");
        make_checked_dir(home / "cache" / "interpreters");
        return home / "cache" / "interpreters";
    } catch (const std::exception& e) {
        // A refused store is said by the job store itself, later; here only no cache.
        log::debug("python", std::string("no interpreter cache: ") + e.what());
        return std::nullopt;
    }
}

}  // namespace portal
