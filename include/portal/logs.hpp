// logs.hpp: `portal logs JOB [--run N]`: the program's stdout and stderr as the
// supervisor kept them in jobs/<JOB>/output.log, all its runs one after the
// other, or one run's (each run's record says where its output starts in the log).
// A stream that went to a terminal was left on it and not kept: said on stderr.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace portal {

struct LogsRequest {
    std::string job;
    int run = 0;  // 1-based; 0: every run
    bool follow = false;  // -f: go on printing while the job runs (here or as its Slurm job)
};

int portal_logs(const LogsRequest& request);

// The byte range [begin, end) of output.log (of `log_size` bytes) that holds run
// `index` (0-based) of `runs`: from its log_offset to the next run's, or the end.
std::pair<std::uint64_t, std::uint64_t> run_log_range(const nlohmann::json& runs, std::size_t index,
                                                      std::uint64_t log_size);

}  // namespace portal
