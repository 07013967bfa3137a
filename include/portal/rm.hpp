// rm.hpp: `portal rm JOB...`: deletes jobs - record, output log and checkpoint.
// A job that a process runs (portal-run, portal resume) is refused, naming that
// process; the others given are removed all the same.  A suspended job's
// checkpoint goes with it: it cannot be resumed afterwards.
#pragma once

#include <string>
#include <vector>

namespace portal {

struct RmRequest {
    std::vector<std::string> jobs;
};

// kCliOk when every job was removed, kCliRefused when any was not.
int portal_rm(const RmRequest& request);

}  // namespace portal
