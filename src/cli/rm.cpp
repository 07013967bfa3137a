// rm.cpp: see include/portal/rm.hpp.
#include "portal/rm.hpp"

#include <iostream>
#include <optional>
#include <system_error>

#include "portal/job_lock.hpp"
#include "portal/job_view.hpp"
#include "portal/log.hpp"
#include "portal/remove_job.hpp"

namespace portal {

int portal_rm(const RmRequest& request) {
    int status = kCliOk;
    for (const std::string& name : request.jobs) {
        try {
            const Job job = find_job(portal_home(), name);
            const RemoveResult removed = remove_job(job, "portal rm " + job.id);
            std::cout << "removed " << printable(job.id) << " (" << removed.state << ", " << removed.freed_text()
                      << " freed)\n";
        } catch (const JobBusy& e) {
            log::say("rm", printable(e.what()) + ": stop that process first, or let it end");
            status = kCliRefused;
        } catch (const JobError& e) {
            log::say("rm", printable(e.what()));
            status = kCliRefused;
        }
    }
    return status;
}

}  // namespace portal
