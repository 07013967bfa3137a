// slurm_requeue.cpp: see include/portal/slurm_requeue.hpp.
#include "portal/slurm_requeue.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <unistd.h>

#include "portal/installation.hpp"
#include "portal/job_lock.hpp"
#include "portal/job_recovery.hpp"
#include "portal/log.hpp"
#include "portal/slurm.hpp"
#include "portal/store_trust.hpp"

namespace portal {

namespace {

constexpr int kRefusedExit = 1;
constexpr int kCompletedExit = 0;
constexpr const char* kSubject = "requeue";
// portal-run's options that `portal resume` understands the same way (issue 13
// item 2, preemption); each takes a value.
constexpr const char* kForwardedOptions[] = {"--preempt-signal", "--preempt-grace"};

std::string restart_count() {
    const char* value = std::getenv("SLURM_RESTART_COUNT");
    return value && *value ? value : "0";
}

// Becomes `portal resume ID --requeue ...`, the `portal` next to this portal-run.
int exec_resume(const Job& job, const std::string& mem, const std::vector<std::string>& forwarded) {
    const std::string portal = (std::filesystem::path(self_executable()).parent_path() / "portal").string();
    std::vector<std::string> command{portal, "resume", "--requeue"};
    if (!mem.empty()) command.insert(command.end(), {"--mem", mem});
    // --preempt-signal / --preempt-grace: the resumed run is preempted as this one would be.
    command.insert(command.end(), forwarded.begin(), forwarded.end());
    command.insert(command.end(), {"--", job.id});  // an operand, never read as an option
    std::vector<char*> argv;
    for (auto& word : command) argv.push_back(word.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    log::say(kSubject, "cannot run " + portal + ": " + std::strerror(errno) + "; job " + job.id +
                           " stays suspended (portal resume " + job.id + ")");
    return kRefusedExit;
}

}  // namespace

RequeueStart start_requeued(const std::string& mem, const std::vector<std::string>& forwarded) {
    RequeueStart start;
    start.key = slurm::requeue_key();
    if (!start.key) {
        log::say(kSubject, "--requeue: not inside a Slurm batch job (no SLURM_JOB_ID): the program runs as "
                           "without --requeue");
        return start;
    }
    std::optional<Job> job;
    try {
        job = slurm::find_requeued_job(portal_home(), *start.key);
    } catch (const std::exception& e) {
        // The store is refused or unreadable: portal-run says so when it creates the job.
        log::debug(kSubject, std::string("no requeued job looked up: ") + e.what());
        return start;
    }
    const std::string slurm_job = std::getenv("SLURM_JOB_ID");
    if (!job) {
        if (restart_count() != "0") {
            log::say(kSubject, "Slurm job " + slurm_job + " restarted (SLURM_RESTART_COUNT=" + restart_count() +
                                   ") but left no Portal job: the program starts anew");
        }
        return start;
    }
    nlohmann::json record;
    std::optional<std::string> holder;
    try {
        record = job->read_record();
        holder = lock_holder(*job);
    } catch (const std::exception& e) {
        log::say(kSubject, "job " + job->id + " of Slurm job " + slurm_job + ": " + e.what() +
                               ": nothing of it is run (portal show " + job->id + ")");
        start.exit_code = kRefusedExit;
        return start;
    }
    const std::string state = effective_state(record, holder.has_value());
    if (state == "completed") {
        log::say(kSubject, "job " + job->id + " of Slurm job " + slurm_job +
                               " already completed: it is not run again (portal logs " + job->id + ")");
        start.exit_code = kCompletedExit;
        return start;
    }
    if (state == "running") {
        log::say(kSubject, "job " + job->id + " of Slurm job " + slurm_job + " is running (" + holder.value_or("?") +
                               "): one process runs a job at a time (portal show " + job->id + ")");
        start.exit_code = kRefusedExit;
        return start;
    }
    if (state == "suspended" || (state == "lost" && recovered_checkpoint(*job, record, state))) {
        log::debug(kSubject, "resuming job " + job->id + " (SLURM_RESTART_COUNT=" + restart_count() + ")");
        try {
            job->modify_record([](nlohmann::json& r) {
                if (r.contains(slurm::kRecordField) && r[slurm::kRecordField].is_object()) {
                    r[slurm::kRecordField]["restart_count"] = std::atoi(restart_count().c_str());
                }
            });
        } catch (const std::exception& e) {
            log::debug(kSubject, std::string("restart count not recorded: ") + e.what());
        }
        start.exit_code = exec_resume(*job, mem, forwarded);
        return start;
    }
    log::say(kSubject, "job " + job->id + " of Slurm job " + slurm_job + " is " + state +
                           ", nothing to resume: the program starts anew as a new job");
    return start;
}

void record_requeue_key(const Job& job, const std::string& key) {
    try {
        job.modify_record([&](nlohmann::json& r) {
            nlohmann::json slurm = nlohmann::json::object();
            slurm["requeue_key"] = key;
            if (const char* id = std::getenv("SLURM_JOB_ID")) slurm["job_id"] = id;
            slurm["restart_count"] = std::atoi(restart_count().c_str());
            r[slurm::kRecordField] = slurm;
        });
    } catch (const std::exception& e) {
        log::say(kSubject, "job " + job.id + ": " + e.what() + ": a requeue of Slurm job " + key +
                               " will not find it and starts the program anew");
    }
}

std::vector<std::string> resume_forwarded_options(const std::vector<std::string>& portal_args) {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < portal_args.size(); ++i) {
        for (const char* name : kForwardedOptions) {
            const std::string option = name;
            if (portal_args[i] == option && i + 1 < portal_args.size()) {
                out.insert(out.end(), {portal_args[i], portal_args[i + 1]});
            } else if (portal_args[i].rfind(option + "=", 0) == 0) {
                out.push_back(portal_args[i]);
            }
        }
    }
    return out;
}

}  // namespace portal
