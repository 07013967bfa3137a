// installation.hpp: where the interpreter and Portal's Python package are.
//
// No environment variable is needed: the package is found relative to the running
// executable, <bin>/../lib/portal/python, which holds both in the installed layout
// (<prefix>/bin, <prefix>/lib/portal/python) and in the build tree, which mirrors it.
#pragma once

#include <optional>
#include <string>

#include "portal/interpreter_command.hpp"

namespace portal {

// The absolute path of the running executable (/proc/self/exe).
std::string self_executable();

// The directory holding `_portal/run/boot.py` for the executable at `exe_path`.
std::optional<std::string> find_package_dir(const std::string& exe_path);

// The package found for `exe_path`, with the interpreter the build was configured
// with (portal-run and `portal resume` replace it by the user's or the job's:
// interpreter_choice.hpp); nullopt (after saying why) when the package cannot be found.
std::optional<Installation> locate_installation(const std::string& exe_path);

}  // namespace portal
