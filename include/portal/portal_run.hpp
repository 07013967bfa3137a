// portal_run.hpp: `portal-run [PORTAL OPTIONS] SCRIPT|-m MODULE|-c CODE [ARGS...]`,
// also reachable as `portal run ...`.  The driver, in order:
//   1. split the command line into Portal's options and the program (command_line),
//   2. parse Portal's options (CLI11),
//   3. find the interpreter and Portal's package (installation),
//   4. build the interpreter's command line (interpreter_command),
//   5. start it and wait, mirroring its exit (supervisor).
#pragma once

#include <string>
#include <vector>

namespace portal {

// `args` excludes argv[0]; `invoked_as` names the command in messages and help.
// Returns the exit code.
int portal_run(const std::vector<std::string>& args, const std::string& invoked_as);

}  // namespace portal
