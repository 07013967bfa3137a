// list.cpp: see include/portal/list.hpp.
#include "portal/list.hpp"

#include <iostream>

#include "portal/size.hpp"

namespace portal {

const std::vector<std::string>& job_states() {
    static const std::vector<std::string> states{"running", "suspended", "completed", "failed",
                                                 "expired", "lost",      "unreadable", "refused"};
    return states;
}

std::string list_table(const std::vector<JobView>& views, std::time_t now) {
    std::vector<std::vector<std::string>> rows{
        {"ID", "STATE", "PROGRAM", "STARTED", "UPDATED", "LOOP (ITERATION)", "CHECKPOINT", "EXPIRES IN"}};
    for (const JobView& v : views) {
        const bool suspended = v.state == "suspended";
        const auto bytes = json_uint(v.record, "checkpoint_bytes");
        rows.push_back({
            v.job.id,
            state_text(v),
            v.problem.empty() ? program_text(v.record, false) : "-",
            short_time(v.record, "created"),
            short_time(v.record, "updated"),
            // Where it will continue: only while there is something to continue.
            suspended || v.state == "expired" ? loop_and_iteration(v.record) : "-",
            suspended && bytes ? format_size(*bytes) : "-",
            expires_in(v.record, v.state, now),
        });
        for (std::string& cell : rows.back()) cell = printable(cell);  // a name or a record's text
    }
    return format_table(rows);
}

int portal_list(const ListRequest& request) {
    std::vector<JobView> views;
    for (JobView& v : view_jobs(portal_home())) {
        if (request.state.empty() || v.state == request.state) views.push_back(std::move(v));
    }
    if (request.json) {
        nlohmann::json out = nlohmann::json::array();
        for (const JobView& v : views) out.push_back(view_json(v));
        std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
        return kCliOk;
    }
    if (views.empty()) {
        // On stderr, so that a script reading the table gets nothing but rows.
        std::cerr << (request.state.empty() ? "no jobs in " + printable((portal_home() / "jobs").string())
                                            : "no " + request.state + " jobs")
                  << "\n";
        return kCliOk;
    }
    std::cout << list_table(views, std::time(nullptr));
    return kCliOk;
}

}  // namespace portal
