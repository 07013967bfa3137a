// supervisor.hpp: the process that starts the interpreter and waits for it.
//
// portal-run stays as a small parent so that a death the program cannot report
// itself (SIGKILL from the kernel's OOM killer) is still reported, and so that job
// records and policies have a place to live.  It forwards SIGINT, SIGTERM, SIGHUP
// and SIGQUIT sent to it, and exits as the child did.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "portal/output_tee.hpp"

namespace portal {

// Runs argv[0] (an absolute path) with argv, waits, reports, and returns the exit
// code portal-run must exit with.  With `data_limit`, the child's RLIMIT_DATA is set
// to it before exec (the memory tripwire, see tripwire.hpp).
// With `tee`, the program's stdout and stderr are also kept in the job's log.
int supervise(const std::vector<std::string>& argv,
              std::optional<std::uint64_t> data_limit = std::nullopt, OutputTee* tee = nullptr);

}  // namespace portal
