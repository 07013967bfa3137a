// logs.cpp: see include/portal/logs.hpp.
#include "portal/logs.hpp"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <system_error>

#include "portal/job_view.hpp"
#include "portal/log.hpp"
#include "portal/store_trust.hpp"

#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace portal {

namespace {

std::uint64_t offset_of(const nlohmann::json& run, std::uint64_t fallback) {
    return run.is_object() ? json_uint(run, "log_offset").value_or(fallback) : fallback;
}

// The program's own output, as it wrote it (not escaped: it is the program's, to
// the user's terminal as under python), from a log opened O_NOFOLLOW and checked.
bool copy_range(int fd, std::uint64_t begin, std::uint64_t end) {
    std::string buf(1 << 16, '\0');
    std::uint64_t at = begin;
    while (at < end) {
        const ssize_t got = pread(fd, buf.data(), std::min<std::uint64_t>(end - at, buf.size()),
                                  static_cast<off_t>(at));
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return false;
        if (got == 0) break;
        std::cout.write(buf.data(), got);
        at += static_cast<std::uint64_t>(got);
    }
    std::cout.flush();
    return true;
}

}  // namespace

std::pair<std::uint64_t, std::uint64_t> run_log_range(const nlohmann::json& runs, std::size_t index,
                                                      std::uint64_t log_size) {
    const std::uint64_t begin = std::min(offset_of(runs.at(index), log_size), log_size);
    std::uint64_t end = log_size;
    if (index + 1 < runs.size()) end = std::min(offset_of(runs.at(index + 1), log_size), log_size);
    return {begin, std::max(begin, end)};
}

int portal_logs(const LogsRequest& request) {
    JobView view;
    try {
        view = view_job(find_job(portal_home(), request.job));
    } catch (const JobError& e) {
        log::say("logs", printable(e.what()));
        return kCliRefused;
    }
    if (!view.problem.empty()) {
        log::say("logs", printable(view.problem));
        return kCliRefused;
    }
    const nlohmann::json runs = view.record.value("runs", nlohmann::json::array());
    if (request.run < 0 || (request.run > 0 && static_cast<std::size_t>(request.run) > runs.size())) {
        log::say("logs", "job " + view.job.id + " has " + std::to_string(runs.size()) + " run" +
                             (runs.size() == 1 ? "" : "s") + ", no run " + std::to_string(request.run) +
                             " (see portal show " + view.job.id + ")");
        return kCliRefused;
    }
    int fd = -1;
    try {
        fd = open_store_file(view.job.log_path(), O_RDONLY);  // -1: nothing kept yet
    } catch (const JobError& e) {
        log::say("logs", printable(e.what()));
        return kCliRefused;
    }
    struct stat st {};
    const std::uint64_t log_size = fd >= 0 && fstat(fd, &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
    struct Closer {
        int fd;
        ~Closer() {
            if (fd >= 0) close(fd);
        }
    } closer{fd};
    const std::size_t first = request.run > 0 ? static_cast<std::size_t>(request.run - 1) : 0;
    const std::size_t last = request.run > 0 ? first + 1 : runs.size();
    for (std::size_t i = first; i < last; ++i) {
        if (!runs[i].value("output_kept", true)) {
            log::say("logs", "run " + std::to_string(i + 1) + " of job " + view.job.id +
                                 ": its output went to a terminal and was not kept");
        }
    }
    if (runs.empty() || log_size == 0) {
        return kCliOk;  // nothing kept yet: an empty log is not an error
    }
    // All runs: the whole log, which holds them one after the other.
    const auto [begin, end] = request.run > 0 ? run_log_range(runs, first, log_size)
                                              : std::pair<std::uint64_t, std::uint64_t>{0, log_size};
    if (!copy_range(fd, begin, end)) {
        log::say("logs", "cannot read " + printable(view.job.log_path().string()));
        return kCliRefused;
    }
    return kCliOk;
}

}  // namespace portal
