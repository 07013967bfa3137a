// inspect.hpp: `portal inspect PATH_OR_JOB [--json]`: what a checkpoint holds and
// whether it is sound, read without running it (a checkpoint is code: nothing is
// unpickled).  The reading is Python's (python/_portal/checkpoint/inspect_checkpoint.py,
// the same checks `portal resume` makes first); this command finds the
// checkpoint, then runs that module in the interpreter Portal was built for.
// Exit status: the module's - 0 sound, 1 not (or no checkpoint), 2 usage.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "portal/interpreter_command.hpp"

namespace portal {

struct InspectRequest {
    std::string target;  // a checkpoint, a job directory, or a job id (or prefix)
    bool json = false;
};

int portal_inspect(const InspectRequest& request);

// What to inspect: `target` itself when it names an existing file or directory
// (or has a '/'), else the directory of the job it names; throws JobError.
std::filesystem::path inspect_path(const std::filesystem::path& home, const std::string& target);

// [python, -I, -B, -c, LINE, PATH, (--json)]: the module run on `path`, with
// Portal's package first on sys.path and nothing from the environment.
std::vector<std::string> inspect_argv(const Installation& where, const std::string& path, bool json);

}  // namespace portal
