// list.hpp: `portal list [--json] [--state STATE]`: the jobs of the store, newest
// first, as a table (or a JSON array of their records, with effective states).
#pragma once

#include <ctime>
#include <string>
#include <vector>

#include "portal/job_view.hpp"

namespace portal {

struct ListRequest {
    bool json = false;
    std::string state;  // empty: every state
};

int portal_list(const ListRequest& request);

// The table `portal list` prints, at `now` (a header line, then a row a job).
std::string list_table(const std::vector<JobView>& views, std::time_t now);

// The states `--state` accepts.
const std::vector<std::string>& job_states();

}  // namespace portal
