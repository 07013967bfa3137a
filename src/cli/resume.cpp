// resume.cpp: see include/portal/resume.hpp.
#include "portal/resume.hpp"

#include <array>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <cstdio>
#include <memory>
#include <unistd.h>

#include "portal/installation.hpp"
#include "portal/interpreter_command.hpp"
#include "portal/interpreter_probe.hpp"
#include "portal/options.hpp"
#include "portal/expiry.hpp"
#include "portal/job_recovery.hpp"
#include "portal/job_run.hpp"
#include "portal/job_view.hpp"
#include "portal/job_store.hpp"
#include "portal/log.hpp"
#include "portal/policy.hpp"
#include "portal/preempt.hpp"
#include "portal/size.hpp"
#include "portal/slurm.hpp"
#include "portal/slurm_submit.hpp"
#include "portal/supervisor.hpp"
#include "portal/tripwire.hpp"
#include "portal/job_contract.hpp"  // generated: the environment variables' names

namespace portal {

namespace {

constexpr int kRefused = 1;

// Names of this machine's NVIDIA GPUs (empty when there is none or no driver).
std::string gpu_names() {
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(
        popen("nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null", "r"), pclose);
    if (!pipe) return {};
    std::string out;
    std::array<char, 256> buf{};
    while (fgets(buf.data(), buf.size(), pipe.get())) out += buf.data();
    return out;
}

bool machine_fits(const ResumeRequest& request, const std::string& job_id) {
    if (!request.gpu.empty()) {
        const std::string names = gpu_names();
        if (names.find(request.gpu) == std::string::npos) {
            log::say("resume", "--gpu " + request.gpu + ": this machine has " +
                                   (names.empty() ? std::string("no NVIDIA GPU")
                                                  : "GPUs " + names.substr(0, names.find_last_not_of('\n') + 1)) +
                                   "; the job stays suspended (portal resume " + job_id + ")");
            return false;
        }
    }
    return true;
}

// The interpreter the job ran with, checked to be the same one still (path,
// build, binary, prefix); nullopt after saying why, the job left suspended.  A
// job recorded before interpreters were recorded ran with the build's own.
std::optional<std::string> job_interpreter(const nlohmann::json& record, const Installation& where,
                                           const std::string& job_id) {
    const auto recorded = from_record(record);
    if (!recorded) {
        return where.python;
    }
    const std::string stays = ": the job stays suspended (portal show " + job_id + ")";
    if (access(recorded->path.c_str(), X_OK) != 0) {
        log::say("resume", "python: " + printable(recorded->path) + ", the interpreter this job ran with (" +
                               printable(describe(*recorded)) + "), is gone" + stays);
        return std::nullopt;
    }
    // Before it is run at all (asking its version runs its site and .pth files):
    // still the user's.  Then the same (difference(): the binary, the prefix, the
    // venv's pyvenv.cfg and python link as fingerprinted at the run).
    const std::string ran_with = "the interpreter this job ran with (" + describe(*recorded) + ")";
    if (const auto why = untrusted_reason(*recorded)) {
        log::say("resume", "python: " + printable(*why) + ", so another user could have replaced or changed " +
                               printable(ran_with) + "; it is not run" + stays +
                               "; if it is yours, make it so again (chown, chmod go-w) and resume");
        return std::nullopt;
    }
    try {
        const Interpreter now =
            probe_interpreter({recorded->path, InterpreterSource::Option}, interpreter_cache_dir());
        const std::string differs = difference(*recorded, now);
        if (!differs.empty()) {
            log::say("resume", "python: " + printable(recorded->path) +
                                   " is not the interpreter this job ran with (" + printable(differs) + ")" + stays);
            return std::nullopt;
        }
        if (const auto reason = unsupported_reason(now, where.package_dir)) {
            log::say("resume", "python: " + printable(*reason) + stays);
            return std::nullopt;
        }
        return now.path;
    } catch (const std::exception& e) {
        // Gone, or no longer an interpreter.
        log::say("resume", "python: " + printable(recorded->path) + " is not the interpreter this job ran with (" +
                               printable(e.what()) + "; it ran with " + printable(describe(*recorded)) + ")" + stays);
        return std::nullopt;
    }
}

std::vector<std::string> command_of(const ResumeRequest& request, const std::string& id) {
    std::vector<std::string> command{"portal", "resume", id};
    if (request.requeue) command.push_back("--requeue");
    if (!request.mem.empty()) command.insert(command.end(), {"--mem", request.mem});
    if (!request.gpu.empty()) command.insert(command.end(), {"--gpu", request.gpu});
    if (!request.device_map.empty()) command.insert(command.end(), {"--device-map", request.device_map});
    for (const auto& p : request.policies) command.insert(command.end(), {"--policy", p});
    return command;
}

}  // namespace

int portal_resume(const ResumeRequest& request) {
    const std::optional<OnSpec> on = parse_on(request.on);
    if (!on) {
        const bool long_partition = request.on.rfind("slurm:", 0) == 0 && request.on.size() > 6 + kPartitionMax;
        log::say("resume", "--on " + printable(options::shown(request.on)) + ": not supported (" + kOnSupported +
                               (long_partition ? "; a partition name has at most " + std::to_string(kPartitionMax) +
                                                     " characters"
                                               : std::string()) +
                               ")");
        return kCliUsage;
    }
    if (!on->slurm && (!request.time.empty() || !request.account.empty())) {
        log::say("resume", std::string(request.time.empty() ? "--account" : "--time") +
                               " is for --on slurm: a resume here runs until it ends (see portal resume --help)");
        return kCliUsage;
    }
    Job job;
    nlohmann::json record;
    JobView view;
    try {
        job = find_job(portal_home(), request.job);
        view = view_job(job);  // refused (not ours), unreadable, or recovered from its checkpoint
        if (view.problem.empty()) {
            expire_if_due(job, std::time(nullptr));
            view = view_job(job);
        }
    } catch (const JobError& e) {
        log::say("resume", printable(e.what()));
        return kRefused;
    }
    if (!view.problem.empty()) {
        log::say("resume", printable(view.problem) + ": nothing of it is run");
        return kRefused;
    }
    record = view.record;
    const std::string state = view.state;
    if (state == "expired") {
        log::say("resume", "job " + job.id + " expired at " + record.value("expired_at", "?") +
                               ": its checkpoint was kept 3 days and is deleted; there is nothing to resume");
        return kRefused;
    }
    if (state == "running") {
        // The holder read when the state was judged (view_job): asked again, a holder
        // that died in between would be named "?" where the job is now lost.
        log::say("resume", "job " + job.id + " is running (" + view.holder.value_or("another process") +
                               "): one process runs a job at a time (portal show " + job.id + ")");
        return kRefused;
    }
    if (state != "suspended") {
        log::say("resume", "job " + job.id + " is " + state + ", not suspended: there is nothing to resume");
        return kRefused;
    }
    if (on->slurm) {
        try {
            parse_policies(request.policies);  // refused here, not on the node
        } catch (const PolicyError& e) {
            log::say("policy", std::string(e.what()) + " (see portal resume --help)");
            return kRefused;
        }
        return submit_resume_to_slurm(request, *on, job, record);
    }
    // SIGTERM (and --preempt-signal) from here on is a request the resumed program
    // takes at its first iteration start (docs/preemption.md), not the end of the
    // command while it checks the job.
    preempt::Settings preemption;
    if (!request.preempt_signal.empty()) {
        preemption.signals.push_back(preempt::parse_signal(request.preempt_signal));
    }
    if (request.preempt_grace >= 0) preemption.grace_seconds = request.preempt_grace;
    preempt::configure(preemption);
    preempt::hold_until_supervised();
    if (!machine_fits(request, job.id)) {
        return kRefused;
    }
    auto installation = locate_installation(self_executable());
    if (!installation) {
        return kRefused;
    }
    const auto python = job_interpreter(record, *installation, job.id);
    if (!python) {
        return options::kUsageExit;
    }
    installation->python = *python;
    // --mem caps the resumed job as if the machine had that much (the tripwire), so
    // that it is suspended again, not killed, if it needs more still.
    // Checked while parsing (options::mem_size, the one check portal-run makes too):
    // a size this machine has.
    const std::optional<std::uint64_t> requested =
        request.mem.empty() ? std::nullopt
                            : std::optional<std::uint64_t>(parse_mem_option(request.mem, tripwire::machine_memory()));
    try {
        // Each policy given again replaces the job's own of that key; the others are
        // kept (python/_portal/restore/resume.py merges them).
        set_boot_policy(parse_policies(request.policies));
    } catch (const PolicyError& e) {
        log::say("policy", std::string(e.what()) + " (see portal resume --help)");
        return kRefused;
    }
    if (!request.device_map.empty()) {
        // Read by the restore while it rebuilds CUDA tensors (torch/objects.py); the
        // program itself gets back the environment the job had.
        setenv(::portal::contract::env::kDeviceMap, request.device_map.c_str(), 1);
    }
    std::optional<JobRun> run;
    try {
        // The lock, then the state again: another resume may have won the race.
        run.emplace(JobRun::resume(job, command_of(request, job.id), requested));
        if (view.recovered) {
            // Under the lock now: the record learns the checkpoint it missed (the
            // restore verifies the checkpoint's signature and job id itself).
            job.modify_record([&](nlohmann::json& r) {
                if (const auto recovery = recovered_checkpoint(job, r, effective_state(r, false))) {
                    apply_recovery(r, *recovery);
                }
            });
        }
        if (job.read_record().value("state", "") != "suspended") {
            log::say("resume", "job " + job.id + " was resumed by another process meanwhile (portal show " +
                                   job.id + ")");
            return kRefused;
        }
    } catch (const JobBusy& e) {
        log::say("resume", printable(e.what()) + ": one process runs a job at a time (portal show " +
                               job.id + ")");
        return kRefused;
    } catch (const JobError& e) {
        log::say("resume", printable(e.what()));
        return kRefused;
    }
    // The program ran only if the restore marked the job running; a resume refused
    // before that (a source changed, a damaged checkpoint) leaves the job
    // suspended, intact, to be resumed once the cause is fixed (JobRun::finish).
    // SIGTERM (and --preempt-signal) suspend the resumed program at a safe point
    // (configured above).
    // Retries (--policy oom.action=retry) resume it again at once (job_run.hpp).
    const auto argv = resume_argv(job.dir.string(), *installation);
    const int code = run->run_to_end(argv, tripwire::memory_cap(requested), true, argv);
    if (request.requeue) slurm::requeue_if_preempted(job, code);
    return code;
}

}  // namespace portal
