// logs.cpp: see include/portal/logs.hpp.
#include "portal/logs.hpp"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <system_error>

#include "portal/job_lock.hpp"
#include "portal/job_view.hpp"
#include "portal/log.hpp"
#include "portal/slurm.hpp"
#include "portal/slurm_status.hpp"
#include "portal/store_trust.hpp"

#include <chrono>
#include <thread>

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

// `portal logs -f`: how often the log is read again, and how often (in those
// rounds) the Slurm job's state is asked again (squeue costs slurmctld a request).
constexpr auto kFollowInterval = std::chrono::milliseconds(250);
constexpr int kSlurmPollRounds = 8;

std::uint64_t size_of_fd(int fd) {
    struct stat st {};
    return fd >= 0 && fstat(fd, &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
}

// Whether anything may still write to the job's log: a process holds the job
// here, or the Slurm job it records is pending or running.
struct Activity {
    bool active = false;
    std::string slurm_state;  // empty: no Slurm job recorded
};

Activity activity_of(const Job& job, const nlohmann::json& record) {
    Activity a;
    try {
        a.active = lock_holder(job).has_value();
    } catch (const JobError&) {
        a.active = false;  // a job.lock not ours: its view says so; nothing to follow
    }
    if (const auto slurm_job = recorded_slurm_job(record)) {
        a.slurm_state = slurm_job_state(*slurm_job);
        a.active = a.active || slurm_job_active(a.slurm_state);
    }
    return a;
}

// A submission (`portal resume --on slurm`) whose Slurm job never started a run of
// the job: its own output file says why (the node's `portal resume` refused, sbatch's
// script could not start...).  Printed after the log, on stdout, introduced on stderr.
void show_slurm_output_if_no_run(const Job& job, const nlohmann::json& record, const std::string& state) {
    const auto slurm_job = recorded_slurm_job(record);
    if (!slurm_job) return;
    const nlohmann::json& s = record[slurm::kRecordField];
    const std::string submitted = s.value("submitted", "");
    if (submitted.empty() || slurm_job_active(state)) return;
    const nlohmann::json runs = record.value("runs", nlohmann::json::array());
    if (!runs.empty() && runs.back().is_object() && runs.back().value("started", "") >= submitted) return;
    const std::filesystem::path output = job.dir / ("slurm-" + *slurm_job + ".out");
    int fd = -1;
    try {
        fd = open_store_file(output, O_RDONLY);
    } catch (const JobError& e) {
        log::say("logs", printable(e.what()));
        return;
    }
    if (fd < 0) return;
    const std::uint64_t size = size_of_fd(fd);
    if (size > 0) {
        log::say("logs", "Slurm job " + *slurm_job + " (" + printable(state) + ") ran no part of job " + job.id +
                             "; its own output, " + printable(output.string()) + ":");
        copy_range(fd, 0, size);
    }
    close(fd);
}

// Prints the log from `offset` on as it grows, while the job runs here or its
// Slurm job is pending or running; then the rest.
int follow_log(const Job& job, std::uint64_t offset) {
    int fd = -1;
    Activity activity;
    for (int round = 0;; ++round) {
        nlohmann::json record;
        try {
            record = job.read_record();
            if (fd < 0) fd = open_store_file(job.log_path(), O_RDONLY);
        } catch (const JobError& e) {
            log::say("logs", printable(e.what()));
            if (fd >= 0) close(fd);
            return kCliRefused;
        }
        if (round % kSlurmPollRounds == 0) activity = activity_of(job, record);
        const std::uint64_t size = size_of_fd(fd);
        if (size > offset) {
            copy_range(fd, offset, size);
            offset = size;
        }
        if (!activity.active) {
            if (fd >= 0 && size_of_fd(fd) > offset) copy_range(fd, offset, size_of_fd(fd));
            if (fd >= 0) close(fd);
            if (!activity.slurm_state.empty()) {
                show_slurm_output_if_no_run(job, record, activity.slurm_state);
                log::say("logs", "Slurm job " + recorded_slurm_job(record).value_or("?") + " of job " + job.id +
                                     " is " + printable(activity.slurm_state) + " (portal show " + job.id + ")");
            }
            return kCliOk;
        }
        std::this_thread::sleep_for(kFollowInterval);
    }
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
    if (request.follow) {
        const std::uint64_t from = request.run > 0 ? run_log_range(runs, first, log_size).first : 0;
        return follow_log(view.job, from);
    }
    if (const auto slurm_job = recorded_slurm_job(view.record)) {
        const std::string state = slurm_job_state(*slurm_job);
        if (slurm_job_active(state)) {
            log::say("logs", "job " + view.job.id + " is Slurm job " + *slurm_job + ", " + printable(state) +
                                 ": the log grows while it runs (portal logs -f " + view.job.id + " follows it)");
        } else if (request.run == 0) {
            if (!runs.empty() && log_size > 0 && !copy_range(fd, 0, log_size)) {
                log::say("logs", "cannot read " + printable(view.job.log_path().string()));
                return kCliRefused;
            }
            show_slurm_output_if_no_run(view.job, view.record, state);
            return kCliOk;
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
