// interpreter_probe.hpp: what the chosen interpreter is, asked of itself.
//
// The interpreter is run once (`PATH -c PROBE`, stdin /dev/null) and reports
// its version, implementation, extension-module suffix (its SOABI),
// sys.executable, sys._base_executable, sys.prefix, sys.base_prefix,
// sys.version and its bytecode magic.  A shim (a script such as pyenv's shims/python3) is resolved so:
// the probe runs through it and the program then runs in the sys.executable it
// reported, the real interpreter.  Anything else (a binary, a venv's symlink) runs
// by the path chosen, so that CPython finds a venv's pyvenv.cfg from it.
//
// The answer for a binary is cached in $PORTAL_HOME/cache/interpreters/ (a run
// pays one interpreter start less: docs/interpreters.md), keyed by the stat of
// the chosen path, of the binary and of the pyvenv.cfg files CPython would read;
// a cache file is read only through the store's trust checks (store_trust.hpp)
// and used only when its key matches.  A shim's answer is never cached: it
// depends on the working directory and the environment.
#pragma once

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "portal/interpreter_choice.hpp"

namespace portal {

struct Interpreter {
    std::string chosen;          // the path as chosen (interpreter_choice.hpp)
    std::string source;          // source_name() of the choice, or "job" on resume
    std::string path;            // the path run: `chosen`, or a shim's sys.executable
    std::string real_path;       // realpath(path): the binary itself
    std::string fingerprint;     // of the binary: "size N, modified T.NS, inode I"
    std::string version;         // "3.11.2"
    std::string implementation;  // "cpython"
    std::string ext_suffix;      // ".cpython-311-x86_64-linux-gnu.so"
    std::string executable;      // sys.executable
    std::string base_executable; // sys._base_executable
    std::string prefix;          // sys.prefix
    std::string base_prefix;     // sys.base_prefix
    std::string build;           // sys.version, one line
    std::string pyc_magic;       // importlib's MAGIC_NUMBER[:2] in hex ("a70d"), "" if unknown
    // Of a virtual environment (sys.prefix != sys.base_prefix): the stat
    // fingerprints of its pyvenv.cfg and of `path` itself (the venv's python
    // link), "" for none.  Recorded with the job, compared at resume.
    std::string venv_fingerprint;
    bool venv_recorded = false;  // from_record found venv_fingerprint (absent in older records)
};

// The interpreter could not be asked (it does not start, or says nothing a
// Python would): what() is the problem, said under the "python" subject.
struct ProbeFailed : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Probes `choice`, through the cache in `cache_dir` when given (a directory of
// the store, already checked: the caller found the store trusted).
Interpreter probe_interpreter(const InterpreterChoice& choice,
                              const std::optional<std::filesystem::path>& cache_dir);

// "3.11" of "3.11.2".
std::string major_minor(const std::string& version);

// The versions Portal's code supports (one list, from the build: PORTAL_SUPPORTED_PYTHONS).
std::vector<std::string> supported_versions();

// The versions whose native modules (_portal/_frames<EXT_SUFFIX>) are installed
// in `package_dir`, sorted: "built here for".
std::vector<std::string> built_versions(const std::string& package_dir);

// Why `python` cannot run Portal from `package_dir` (one line, naming the
// supported versions and how to choose another), or nullopt when it can.
std::optional<std::string> unsupported_reason(const Interpreter& python, const std::string& package_dir);

// "/usr/bin/python3 (CPython 3.11.2, chosen by PORTAL_PYTHON)"; for a shim also
// "via /root/.pyenv/shims/python3".
std::string describe(const Interpreter& python);

// The job record's "interpreter" object, and back (nullopt: absent or malformed).
nlohmann::json to_record(const Interpreter& python);
std::optional<Interpreter> from_record(const nlohmann::json& record);

// How `now` differs from the `recorded` interpreter of a job ("" when it is the
// same build at the same place): "recorded CPython 3.11.2 (...) at /usr/bin/python3.11, size ...; now ...".
std::string difference(const Interpreter& recorded, const Interpreter& now);

// The venv_fingerprint of `python` as its files are now (from its path and
// prefix: nothing is run).
std::string venv_fingerprint(const Interpreter& python);

// Why the interpreter `python` (a job's, as recorded: checked before it is run) could have been replaced or
// changed by another user: the path run, the binary and, for a virtual
// environment, its directory, pyvenv.cfg, bin and site-packages checked by
// others_could_change (store_trust.hpp); nullopt when none could.
std::optional<std::string> untrusted_reason(const Interpreter& python);

// $PORTAL_HOME/cache/interpreters, created 0700 inside an existing, trusted store;
// nullopt (no cache: probed every time) when there is no store yet or it is refused.
std::optional<std::filesystem::path> interpreter_cache_dir();

// The stat fingerprint of the file at `path` ("" when it cannot be read); of a
// symlink itself when not `follow`.
std::string file_fingerprint(const std::string& path, bool follow = true);

}  // namespace portal
