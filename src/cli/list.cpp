// list.cpp: see include/portal/list.hpp.
#include "portal/list.hpp"

#include <algorithm>
#include <cstdlib>
#include <iostream>

#include <sys/ioctl.h>
#include <unistd.h>

#include "portal/size.hpp"

namespace portal {

const std::vector<std::string>& job_states() {
    static const std::vector<std::string> states{"running", "suspended", "completed", "failed",
                                                 "expired", "lost",      "unreadable", "refused"};
    return states;
}

std::size_t output_columns(const char* columns_env, int fd) {
    if (columns_env != nullptr && *columns_env != '\0') {
        const std::string text = columns_env;
        if (text.size() <= 6 && text.find_first_not_of("0123456789") == std::string::npos) {
            const long value = std::atol(text.c_str());
            if (value > 0) return static_cast<std::size_t>(value);
        }
    }
    if (isatty(fd) == 1) {
        struct winsize size {};
        if (ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
    }
    return 0;
}

std::string list_table(const std::vector<JobView>& views, std::time_t now, std::size_t columns) {
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
    constexpr std::size_t kProgram = 2;  // the PROGRAM column
    constexpr std::size_t kGap = 2;      // format_table's spaces between columns
    if (columns > 0) {
        // What the other columns take; the program gets the rest, at least kProgramMin.
        std::size_t others = 0;
        for (std::size_t i = 0; i < rows.front().size(); ++i) {
            if (i == kProgram) continue;
            std::size_t widest = 0;
            for (const auto& row : rows) widest = std::max(widest, row[i].size());
            others += widest + (i + 1 < rows.front().size() ? kGap : 0);
        }
        const std::size_t room = std::max(kProgramMin, columns > others + kGap ? columns - others - kGap : 0);
        for (auto& row : rows) {
            std::string& cell = row[kProgram];
            if (cell.size() > room) cell = cell.substr(0, room - 3) + "...";
        }
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
    std::cout << list_table(views, std::time(nullptr), output_columns(std::getenv("COLUMNS"), STDOUT_FILENO));
    return kCliOk;
}

}  // namespace portal
