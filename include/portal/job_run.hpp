// job_run.hpp: one run of a job, as its supervisor records it.
//
// portal-run creates the job (state "running") before the program starts;
// `portal resume` attaches to a suspended one.  Either way the supervisor holds
// the job's lock for the whole run, and the interpreter holds it with it
// (job_lock.hpp), keeps the program's output
// (output_tee.hpp), hands the job's directory to the interpreter
// (PORTAL_JOB_DIR, which boot.py removes before the program starts), and at the
// end records how the run ended.  A suspension itself is recorded by the
// interpreter process (python/_portal/rescue/suspend.py), which alone knows the loop.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "portal/command_line.hpp"
#include "portal/job_lock.hpp"
#include "portal/job_store.hpp"
#include "portal/output_tee.hpp"

namespace portal {

class JobRun {
public:
    // A new job for `program`, started by `command` (portal-run's argv).
    static JobRun start(const ProgramSpec& program, const std::vector<std::string>& command,
                        const std::map<std::string, std::string>& policies,
                        std::optional<std::uint64_t> mem);
    // Another run of an existing job; throws JobBusy when another process runs it.
    static JobRun resume(const Job& job, const std::vector<std::string>& command,
                         std::optional<std::uint64_t> mem);

    const Job& job() const { return job_; }
    OutputTee* tee() { return tee_.get(); }
    // Runs the interpreter `argv` under the supervisor (supervisor.hpp) with the
    // job's output kept and - with `bootstrapped` (interpreter_command.hpp's
    // runs_bootstrap), whose bootstrap hides them from the program - its lock and
    // directory handed to the interpreter too, so that the job stays locked for as
    // long as any process of it runs.  Without it the program sees neither: the
    // supervisor alone holds the lock (and the program dies with it).
    int supervise(const std::vector<std::string>& argv, std::optional<std::uint64_t> data_limit,
                  bool bootstrapped = true);
    // Records the run's end from the supervisor's exit code and the record the
    // interpreter left: suspended (it said so), completed, failed, or - for a
    // resume that never reached the program - refused, the job staying suspended.
    // No sound checkpoint is orphaned by a SIGKILL of the program (the kernel's
    // out-of-memory killer, kill -9): killed after it recorded its suspension, the
    // run is suspended (`exit_code` becomes 75); killed while it ran on from a
    // checkpoint (a resume's, or one it committed), the job is suspended at that
    // checkpoint (recovered, job_recovery.hpp) and the run failed.  A checkpoint
    // writer's leftovers of the program's (.checkpoint.tmp-PID-*) are removed.
    // Returns the interpreter's retry request (python/_portal/rescue/retry.py: the
    // record's retry_requested, moved into this run's entry as "retry"), or null.
    nlohmann::json finish(int& exit_code);
    // supervise() then finish(), and again for as long as the interpreter asks for
    // a retry (--policy oom.action=retry): a run of kind "retry" per retry, each
    // resuming the job at once with `resume_argv`, under the same memory cap, with
    // PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True added when the program used
    // CUDA and neither it nor this environment sets the variable.  Returns the
    // last run's exit code: the program's.
    int run_to_end(const std::vector<std::string>& argv, std::optional<std::uint64_t> data_limit,
                   bool bootstrapped, const std::vector<std::string>& resume_argv);

private:
    JobRun(Job job, JobLock lock) : job_(std::move(job)), lock_(std::move(lock)) {}
    void begin(const std::string& kind, const std::vector<std::string>& command,
               std::optional<std::uint64_t> mem, const nlohmann::json& extra = nlohmann::json::object());
    void remove_writer_leftovers() const;
    Job job_;
    std::vector<std::string> command_;
    std::optional<std::uint64_t> mem_;
    JobLock lock_;
    std::unique_ptr<OutputTee> tee_;
    std::size_t run_index_ = 0;
    pid_t program_pid_ = 0;  // the last interpreter supervise() started
};

// The job's name stem: the script's name without .py, the module's name, or
// "command" for -c.
std::string job_stem(const ProgramSpec& program);

}  // namespace portal
