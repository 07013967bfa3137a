// job_run.cpp: see include/portal/job_run.hpp.
#include "portal/job_run.hpp"

#include <csignal>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <unistd.h>

#include "portal/exit_status.hpp"
#include "portal/job_recovery.hpp"
#include "portal/log.hpp"
#include "portal/preempt.hpp"
#include "portal/supervisor.hpp"
#include "portal/job_contract.hpp"  // generated: the environment variables' names

namespace portal {

namespace fs = std::filesystem;

namespace {

// A run that resumes the job at once after a rescue asked for it (oom.action=retry).
constexpr const char* kRetryRunKind = "retry";
// What a retry on CUDA sets unless the program or the environment sets it: the
// allocator grows segments instead of fragmenting fixed ones.
constexpr const char* kAllocConfVariable = "PYTORCH_CUDA_ALLOC_CONF";
constexpr const char* kExpandableSegments = "expandable_segments:True";

std::string joined(const std::vector<std::string>& words) {
    std::string text;
    for (const auto& w : words) text += (text.empty() ? "" : " ") + w;
    return text;
}

const char* kind_name(ProgramKind kind) {
    switch (kind) {
        case ProgramKind::Script: return "script";
        case ProgramKind::Module: return "module";
        case ProgramKind::Command: return "command";
        default: return "none";
    }
}

}  // namespace

std::string job_stem(const ProgramSpec& program) {
    switch (program.kind) {
        case ProgramKind::Script: {
            std::string stem = fs::path(program.target).stem().string();
            return stem.empty() ? "script" : stem;
        }
        case ProgramKind::Module: return program.target;
        default: return "command";
    }
}

JobRun JobRun::start(const ProgramSpec& program, const std::vector<std::string>& command,
                     const std::map<std::string, std::string>& policies, std::optional<std::uint64_t> mem) {
    std::error_code ec;
    const fs::path cwd = fs::current_path(ec);
    nlohmann::json record = {
        {"state", "running"},
        {"program", {{"kind", kind_name(program.kind)},
                     {"target", program.kind == ProgramKind::Script ? fs::absolute(program.target, ec).string()
                                                                     : program.target}}},
        {"args", program.args},
        {"cwd", cwd.string()},
        {"policies", policies},
        {"runs", nlohmann::json::array()},
    };
    if (program.kind == ProgramKind::Script) {
        record["script"] = record["program"]["target"];
    }
    Job job = create_job(portal_home(), job_stem(program), record);
    JobRun run(job, JobLock::acquire(job, joined(command)));
    run.begin("run", command, mem);
    return run;
}

JobRun JobRun::resume(const Job& job, const std::vector<std::string>& command, std::optional<std::uint64_t> mem) {
    JobRun run(job, JobLock::acquire(job, joined(command)));
    run.begin("resume", command, mem);
    return run;
}

void JobRun::begin(const std::string& kind, const std::vector<std::string>& command,
                   std::optional<std::uint64_t> mem, const nlohmann::json& extra) {
    command_ = command;
    mem_ = mem;
    tee_ = std::make_unique<OutputTee>(job_.log_path());
    const auto log_start = tee_->log_size();
    nlohmann::json entry = {
        {"kind", kind},
        {"command", command},
        {"started", utc_iso(std::time(nullptr))},
        {"pid", getpid()},
        {"mem", mem ? nlohmann::json(*mem) : nlohmann::json(nullptr)},
        {"log_offset", log_start},
        {"output_kept", tee_->kept()},
    };
    entry.update(extra);
    const nlohmann::json record = job_.modify_record([&](nlohmann::json& r) {
        if (!r["runs"].is_array()) r["runs"] = nlohmann::json::array();
        r["runs"].push_back(entry);
    });
    run_index_ = record["runs"].size() - 1;
    setenv(::portal::contract::env::kJobDir, job_.dir.c_str(), 1);
}

int JobRun::supervise(const std::vector<std::string>& argv, std::optional<std::uint64_t> data_limit,
                      bool bootstrapped) {
    if (!bootstrapped) {
        unsetenv(::portal::contract::env::kJobDir);
    }
    // Only Portal's bootstrap takes preemption requests: another interpreter
    // gets SIGTERM as it is.
    const preempt::Settings settings = preempt::settings();
    if (!bootstrapped) {
        preempt::Settings off = settings;
        off.enabled = false;
        preempt::configure(off);
    }
    const int code = portal::supervise(argv, data_limit, tee(), bootstrapped ? lock_.fd() : -1,
                                       [this](pid_t pid) {
                                           program_pid_ = pid;
                                           lock_.name_program(pid);
                                       });
    preempt::configure(settings);
    return code;
}

int JobRun::run_to_end(const std::vector<std::string>& argv, std::optional<std::uint64_t> data_limit,
                       bool bootstrapped, const std::vector<std::string>& resume_argv) {
    int code = supervise(argv, data_limit, bootstrapped);
    for (nlohmann::json retry = finish(code); retry.is_object(); retry = finish(code)) {
        nlohmann::json extra = {{"reason", "retry: " + retry.value("error", std::string("out of memory"))},
                                {"item", {{"loop", retry.value("loop", nlohmann::json())},
                                          {"iteration", retry.value("iteration", nlohmann::json())}}}};
        try {
            begin(kRetryRunKind, command_, mem_, extra);
        } catch (const JobError& e) {
            log::say("retry", std::string(e.what()) + "; the job stays suspended (portal resume " + job_.id + ")");
            return code;
        }
        const bool set_alloc_conf = retry.value("cuda", false) && !retry.value("user_alloc_conf", false) &&
                                    std::getenv(kAllocConfVariable) == nullptr;
        if (set_alloc_conf) setenv(kAllocConfVariable, kExpandableSegments, 1);
        code = supervise(resume_argv, data_limit, true);
        if (set_alloc_conf) unsetenv(kAllocConfVariable);
    }
    return code;
}

void JobRun::remove_writer_leftovers() const {
    if (program_pid_ <= 0) return;
    // checkpoint/write.py's names: .checkpoint.tmp-PID-XXXX (mkdtemp), .checkpoint.link-PID.
    const std::string tmp = ".checkpoint.tmp-" + std::to_string(program_pid_) + "-";
    const std::string link = ".checkpoint.link-" + std::to_string(program_pid_);
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(job_.dir, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind(tmp, 0) == 0 || name == link) {
            std::error_code ignored;
            fs::remove_all(entry.path(), ignored);  // a link itself, never what it names
        }
    }
}

nlohmann::json JobRun::finish(int& exit_code) {
    unsetenv(::portal::contract::env::kJobDir);
    // The program has ended (its lock with it): what its writer left is nobody's.
    remove_writer_leftovers();
    const bool killed = portal::program_signal() == SIGKILL && exit_code == kSignalExitBase + SIGKILL;
    nlohmann::json retry;
    std::string note;
    bool suspended_then_killed = false;
    try {
        job_.modify_record([&](nlohmann::json& r) {
            note.clear();
            const std::string state = r.value("state", "unknown");
            nlohmann::json& entry = r["runs"][run_index_];
            entry["ended"] = utc_iso(std::time(nullptr));
            entry["exit_status"] = exit_code;
            std::string outcome;
            const bool suspended_now = state == "suspended" && r.contains("suspended_at") &&
                                       r["suspended_at"] >= entry.value("started", std::string());
            suspended_then_killed = killed && suspended_now;
            if (suspended_then_killed) {
                // Killed between its suspension's record and its exit: the checkpoint
                // was committed before the record said so.
                entry["exit_status"] = kSuspendedExit;
                note = "the program was killed (SIGKILL) after its suspension was recorded; its checkpoint is "
                       "committed: portal resume " + job_.id;
            }
            if ((exit_code == kSuspendedExit || killed) && suspended_now) {
                outcome = "suspended";
                for (const char* key : {"error", "error_at", "loop", "iteration", "checkpoint_bytes", "expires_at",
                                        "reason"}) {
                    if (r.contains(key)) entry[key] = r[key];
                }
                // oom.action=retry (python/_portal/rescue/retry.py): resumed at once by run_to_end().
                if (r.contains("retry_requested") && r["retry_requested"].is_object()) {
                    retry = r["retry_requested"];
                    retry["error"] = r.value("error", std::string());
                    entry["retry"] = r["retry_requested"];
                    outcome = "retried";
                }
                r.erase("retry_requested");
            } else if ((entry.value("kind", "") == "resume" || entry.value("kind", "") == kRetryRunKind) &&
                       state == "suspended") {
                outcome = "refused";  // the restore refused before the program ran: still suspended
            } else {
                outcome = exit_code == 0 ? "completed" : "failed";
                // Killed while it ran on from a checkpoint: the job goes back to it.
                const auto recovery = killed ? recovered_checkpoint(job_, r, "lost") : std::nullopt;
                if (recovery) {
                    apply_recovery(r, *recovery);
                    note = "the job stays suspended at its checkpoint of " + recovery->created +
                           ", which is intact: portal resume " + job_.id;
                } else {
                    r["state"] = outcome;
                    r["exit_status"] = exit_code;
                    r["ended"] = entry["ended"];
                }
            }
            entry["outcome"] = outcome;
        });
    } catch (const JobError& e) {
        log::say("job", e.what());
        return nullptr;
    }
    if (!note.empty()) log::say("job", note);
    if (suspended_then_killed) exit_code = kSuspendedExit;
    return retry;
}

}  // namespace portal
