// list.hpp: `portal list [--json] [--state STATE]`: the jobs of the store, newest
// first, as a table (or a JSON array of their records, with effective states).
#pragma once

#include <cstddef>
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
// `columns` > 0: the PROGRAM column is cut (ending "...") so that each line fits
// that many columns, as git and docker cut theirs (never below kProgramMin).
constexpr std::size_t kProgramMin = 12;
std::string list_table(const std::vector<JobView>& views, std::time_t now, std::size_t columns = 0);

// The width `portal list` fits its table to: $COLUMNS when set to a number, else
// the terminal's (TIOCGWINSZ) when stdout is one; 0 (no cut) otherwise.
std::size_t output_columns(const char* columns_env, int fd);

// The states `--state` accepts.
const std::vector<std::string>& job_states();

}  // namespace portal
