// command_line.hpp: splitting portal-run's arguments into Portal's own options and
// the program to run.
//
// `portal-run [PORTAL OPTIONS] SCRIPT [ARGS...]`, `... -m MODULE [ARGS...]`,
// `... -c CODE [ARGS...]`: Portal's options come first; the first argument that is
// not one of them (or `--`, -m, -c) starts the program, and everything after it
// belongs to the program untouched, `--help` included.
#pragma once

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace portal {

enum class ProgramKind { None, Script, Module, Command };

struct ProgramSpec {
    ProgramKind kind = ProgramKind::None;
    std::string target;             // the script path, module name or code
    std::vector<std::string> args;  // the program's arguments (sys.argv[1:])
    // The program's words as typed, before its arguments: {"x.py"}, {"--", "x.py"},
    // {"-m", "mod"}, {"-mmod"}: python keeps that spelling in sys.orig_argv.
    std::vector<std::string> spelling;
};

struct SplitCommandLine {
    std::vector<std::string> portal_args;  // Portal's options, in order, for the option parser
    ProgramSpec program;
};

// A command line that cannot be split (e.g. `-m` with no module).
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// `args` excludes argv[0].  `options_with_value` are the long and short options of
// Portal that take a separate value (`--mem 2G`); `--mem=2G` needs no listing.
SplitCommandLine split_command_line(const std::vector<std::string>& args,
                                    const std::set<std::string>& options_with_value);

}  // namespace portal
