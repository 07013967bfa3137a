// show.hpp: `portal show JOB [--json]`: everything about one job - its state and
// who holds it, the program, its runs and how each ended, where it ran out of
// memory, the loop and iteration it continues from, the checkpoint, the expiry
// and the time left, and the command that resumes it.
#pragma once

#include <ctime>
#include <string>

#include "portal/job_view.hpp"

namespace portal {

struct ShowRequest {
    std::string job;
    bool json = false;
};

int portal_show(const ShowRequest& request);

// The text `portal show` prints for `view` at `now`.
std::string show_text(const JobView& view, std::time_t now);

// "portal resume train-3f9a2c --mem 64".
std::string resume_command(const JobView& view);

}  // namespace portal
