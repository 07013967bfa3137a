// interpreter_choice.hpp: which python3 runs the program (docs/interpreters.md).
//
// The interpreter `python3` would be for this user, in this order:
//   1. portal-run --python PATH (a bare name is looked up on PATH, as a shell does),
//   2. $PORTAL_PYTHON (the same),
//   3. the active venv: $VIRTUAL_ENV/bin/python3,
//   4. the active conda env: $CONDA_PREFIX/bin/python3,
//   5. the first executable `python3` on $PATH.
// The path is kept as given (made absolute, symlinks NOT resolved): a venv's
// bin/python3 is a symlink whose own path is what makes CPython find pyvenv.cfg.
#pragma once

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

namespace portal {

// Where the choice came from, as messages name it.
enum class InterpreterSource { Option, PortalPython, VirtualEnv, CondaPrefix, Path };

struct InterpreterChoice {
    std::string path;           // absolute, symlinks kept
    InterpreterSource source;
};

// "--python", "PORTAL_PYTHON", "VIRTUAL_ENV", "CONDA_PREFIX", "PATH".
const char* source_name(InterpreterSource source);

// Why no interpreter could be chosen; what() is the problem, to be said under
// the "python" subject: "VIRTUAL_ENV=/x has no bin/python3; ...".
struct NoInterpreter : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// The environment the choice reads; nullopt for an unset variable (an empty one
// counts as unset too).
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// The process environment (getenv), empty values as unset.
std::optional<std::string> process_env(const std::string& name);

// The first executable regular file `name` in the colon-separated `path_list`
// (an empty entry is the working directory, as execvp does); nullopt if none.
std::optional<std::string> search_path(const std::string& name, const std::string& path_list);

// The choice, in the order above.  `option` is --python's value (nullopt: not
// given).  Throws NoInterpreter when the chosen source names nothing executable
// (a named interpreter that is missing is never passed over silently).
InterpreterChoice choose_interpreter(const std::optional<std::string>& option, const EnvLookup& env);

}  // namespace portal
