// interpreter_command.hpp: the command line of the interpreter process.
//
// The program runs in a real interpreter - the user's, chosen and checked by
// interpreter_choice.hpp / interpreter_probe.hpp - not in one embedded in
// portal-run: embedding libpython3.11.so measured 10-30% slower on call-heavy
// code than the PGO/LTO-built python3 binary (docs/architecture.md).
// Portal's runtime enters through a one-line `-c` bootstrap and then makes the
// process indistinguishable from `python3 SCRIPT ARGS` (python/_portal/run/boot.py).
#pragma once

#include <string>
#include <vector>

#include "portal/command_line.hpp"

namespace portal {

struct Installation {
    std::string python;       // absolute path of the interpreter run, e.g. /home/u/venv/bin/python3
    std::string package_dir;  // directory holding the `_portal` package
    // The interpreter's bytecode magic, its first two bytes in hex ("a70d" for
    // 3.11: importlib's MAGIC_NUMBER, from the probe); empty when not known.
    std::string pyc_magic;
};

// The interpreter option that keeps the working directory off sys.path while
// Portal starts (-P, CPython 3.11+); boot.py gives the program python's sys.path
// and sys.flags back.
extern const char* const kSafePath;

// The `-c` line: puts package_dir first on sys.path and runs _portal.run.boot.main().
std::string bootstrap_line(const std::string& package_dir);

// True when python runs `path` as Python source (a regular file that is neither
// compiled bytecode nor a zip application).  Anything else - a missing file, a
// directory, a .pyc, a zip - is handed to python as it is, so its own messages
// and behaviour apply unchanged (and Portal cannot rescue it).  Compiled bytecode
// is what starts with `pyc_magic` (hex, as Installation's) then \r\n, as CPython
// itself decides; with no magic known, any two bytes then \r\n.
bool runs_as_source(const std::string& path, const std::string& pyc_magic = "");

// [python, -P, -c, BOOT, MODE, TARGET, N, SPELLING(N words)..., ARGS...] for a program
// the bootstrap runs; [python, SCRIPT, ARGS...] for one python runs alone.
std::vector<std::string> interpreter_argv(const ProgramSpec& program, const Installation& where);

// The interpreter's command line that resumes the suspended job in `job_dir`.
std::vector<std::string> resume_argv(const std::string& job_dir, const Installation& where);

// Whether `argv` (from interpreter_argv or resume_argv) starts Portal's bootstrap,
// which takes Portal's settings out of the environment before the program starts;
// false for what python runs itself (a zipapp, a directory, a .pyc).
bool runs_bootstrap(const std::vector<std::string>& argv, const Installation& where);

}  // namespace portal
