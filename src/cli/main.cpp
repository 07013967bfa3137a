// portal: the command-line interface over jobs.  `portal run` is portal-run.
// Every command but run first expires the suspended jobs whose checkpoint is
// past its 3 days (expiry.hpp), so that the store is cleaned without `portal gc`.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "portal/gc.hpp"
#include "portal/inspect.hpp"
#include "portal/job_view.hpp"
#include "portal/list.hpp"
#include "portal/log.hpp"
#include "portal/logs.hpp"
#include "portal/options.hpp"
#include "portal/portal_run.hpp"
#include "portal/preempt.hpp"
#include "portal/resume.hpp"
#include "portal/rm.hpp"
#include "portal/show.hpp"
#include "portal/slurm_submit.hpp"
#include "portal/store_trust.hpp"
#include "portal/supervisor.hpp"
#include "portal/version.hpp"
#include "portal/job_contract.hpp"  // generated: the environment variables' names

namespace {

constexpr const char* kJobHelp = "The job id (a unique prefix is enough; see portal list)";

}  // namespace

int run_portal(int argc, char** argv) {
    const std::vector<std::string> args(argv + 1, argv + argc);
    // PORTAL_HOME absolute from here on, for this process and what it runs (the
    // interpreter of `portal resume`/`portal run`), whatever they chdir() to.
    if (const char* env = std::getenv(::portal::contract::env::kHome); env && *env) {
        setenv(::portal::contract::env::kHome, portal::portal_home().c_str(), 1);
    }
    // `portal run ...` hands everything after `run` to portal-run untouched, so the
    // program's own options (--help included) never reach this parser.
    if (!args.empty() && args.front() == "run") {
        return portal::end_as_the_program_did(
            portal::portal_run(std::vector<std::string>(args.begin() + 1, args.end()), "portal run"));
    }

    CLI::App app{"Portal: suspend a Python job that runs out of memory, resume it on a larger machine.\n"
                 "Jobs are kept in $PORTAL_HOME (default ~/.portal); see docs/cli.md.",
                 "portal"};
    app.require_subcommand(1);
    app.set_version_flag("--version", std::string("portal ") + portal::kVersion);
    app.footer("Exit status: 0 done, 1 refused (unknown job, job in use, ...), 2 usage error;\n"
               "run and resume exit with the program's status (75: suspended again).");
    app.add_subcommand("run", "Run a program under Portal (same as portal-run); see `portal run --help`");

    portal::ListRequest list;
    CLI::App* list_cmd = app.add_subcommand("list", "List the jobs, newest first: state, loop, checkpoint, expiry");
    list_cmd->add_flag("--json", list.json, "Print a JSON array of the job records (state: the effective one)");
    list_cmd->add_option("--state", list.state, "Only the jobs in this state")
        ->check(portal::options::one_of(portal::job_states()));

    portal::ShowRequest show;
    CLI::App* show_cmd = app.add_subcommand(
        "show", "Everything about a job: where it failed, the loop and iteration, its runs, the checkpoint, "
                "its expiry and the command that resumes it");
    show_cmd->add_option("JOB", show.job, kJobHelp)->required();
    show_cmd->add_flag("--json", show.json, "Print the job record as JSON (state: the effective one)");

    portal::LogsRequest logs;
    CLI::App* logs_cmd = app.add_subcommand("logs", "Print the program's output (stdout and stderr) across all "
                                                    "its runs, as the supervisor kept it");
    logs_cmd->add_option("JOB", logs.job, kJobHelp)->required();
    logs_cmd->add_option("--run", logs.run, "Only the output of run N (1 is the first; see portal show)")
        ->check(portal::options::positive_integer());
    logs_cmd->add_flag("-f,--follow", logs.follow,
                       "Go on printing the output as it comes while the job runs, here or as the Slurm "
                       "job it was submitted as (portal resume --on slurm)");

    portal::ResumeRequest resume;
    CLI::App* resume_cmd = app.add_subcommand(
        "resume", "Continue a suspended job here, in the foreground, from the iteration that failed "
                   "(--on slurm: submit that to Slurm instead)");
    resume_cmd->add_option("JOB", resume.job, kJobHelp)->required();
    // --on slurm: the memory is the node's, not this machine's; the node's resume checks it.
    const bool on_slurm = portal::submits_to_slurm(args);
    resume_cmd->add_option("--mem", resume.mem,
                           "Memory the job needs, in GiB or with a unit (64, 512M; at least 256M); "
                           "refused if this machine has less (--on slurm: asked of Slurm)")
        ->type_name("SIZE")
        ->check(portal::options::mem_size(on_slurm ? "" : "resume the job on a larger machine: it stays suspended, intact",
                                          !on_slurm));
    resume_cmd->add_option("--gpu", resume.gpu,
                           "GPU model the job needs (e.g. A100); refused if absent (--on slurm: "
                           "--gres=gpu:TYPE:1)");
    resume_cmd->add_option("--on", resume.on,
                           "Where to run it: 'local' (this machine, the default) or 'slurm[:PARTITION]' "
                           "(submitted with sbatch; see docs/slurm.md)")
        ->type_name("SPEC");
    resume_cmd->add_option("--time", resume.time, "--on slurm: the Slurm job's time limit (sbatch --time)")
        ->type_name("TIME");
    resume_cmd->add_option("--account", resume.account, "--on slurm: the Slurm account to charge (sbatch --account)")
        ->type_name("ACCOUNT");
    resume_cmd->add_flag("--requeue", resume.requeue,
                         "Inside a Slurm batch job (as portal-run --requeue runs it): when the resume is "
                         "preempted, ask Slurm to requeue the batch job");
    resume_cmd->add_option("--preempt-signal", resume.preempt_signal,
                           "Take this signal sent to portal resume (e.g. USR1) as a preemption, as SIGTERM "
                           "always is: the program suspends at the start of its next loop iteration (exit 75)")
        ->type_name("SIG")
        ->check(CLI::Validator(
            [](std::string& text) {
                return portal::preempt::parse_signal(text) > 0
                           ? std::string()
                           : portal::options::shown(text) + ": not a signal a program can be sent (e.g. USR1)";
            },
            ""));
    resume_cmd->add_option("--preempt-grace", resume.preempt_grace,
                           "Seconds a preempted program has to reach the start of a loop iteration before "
                           "it gets the signal itself, as under python (default 60)")
        ->type_name("SECONDS")
        ->check(portal::options::grace_seconds());
    resume_cmd->add_option("--policy", resume.policies,
                           "Set a job policy again (oom.on=false); the job's own are kept otherwise")
        ->type_name("KEY=VALUE");
    resume_cmd->add_option("--device-map", resume.device_map,
                           "Where the job's CUDA tensors go when this machine numbers its GPUs "
                           "differently: FROM:TO[,FROM:TO...] (e.g. 0:1); default: the same index")
        ->type_name("MAP")
        ->check(portal::options::device_map());

    portal::RmRequest rm;
    CLI::App* rm_cmd = app.add_subcommand(
        "rm", "Delete jobs: record, output and checkpoint (a suspended job can no longer be resumed); "
              "a running job is refused");
    rm_cmd->add_option("JOB", rm.jobs, "Job ids (unique prefixes are enough)")->required();

    portal::GcRequest gc;
    CLI::App* gc_cmd = app.add_subcommand(
        "gc", "Free the job store: expire suspended jobs past their 3 days, delete checkpoints nothing can "
              "resume, and remove old ended jobs");
    gc_cmd->add_option("--older-than", gc.older_than_days,
                       "Also remove ended jobs (completed, failed, expired, lost) unchanged for DAYS days")
        ->type_name("DAYS")
        ->check(portal::options::non_negative_number());
    gc_cmd->add_flag("--dry-run", gc.dry_run, "Say what would be freed, change nothing");

    portal::InspectRequest inspect;
    CLI::App* inspect_cmd = app.add_subcommand(
        "inspect", "Read a checkpoint without running it: manifest, frames, sizes, checksums and signature "
                   "verified");
    inspect_cmd->add_option("PATH_OR_JOB", inspect.target,
                            "A checkpoint, a job directory, or a job id (a unique prefix is enough)")
        ->required();
    inspect_cmd->add_flag("--json", inspect.json, "Print the report as one JSON object");

    try {
        std::vector<std::string> reversed(args.rbegin(), args.rend());
        app.parse(reversed);
    } catch (const CLI::CallForHelp&) {
        std::cout << app.help();
        return 0;
    } catch (const CLI::CallForVersion&) {
        std::cout << "portal " << portal::kVersion << "\n";
        return 0;
    } catch (const CLI::ParseError& e) {
        // Named after the command the user typed, when it is one.
        std::string command;
        for (const CLI::App* sub : app.get_subcommands({})) {
            if (sub->parsed() || (!args.empty() && args.front() == sub->get_name())) command = sub->get_name();
        }
        portal::options::say_usage_problem(e, command.empty() ? "portal" : "portal " + command);
        return portal::kCliUsage;
    }

    // The store is the user's own, or no command reads it (store_trust.hpp).
    try {
        portal::trust_store(portal::portal_home(), portal::StoreUse::Read);
    } catch (const portal::JobError& e) {
        portal::log::say("store", portal::printable(e.what()));
        return portal::kCliRefused;
    }
    if (!gc_cmd->parsed()) {
        portal::expire_opportunistically();  // gc expires jobs itself, and says so
    }
    if (list_cmd->parsed()) return portal::portal_list(list);
    if (show_cmd->parsed()) return portal::portal_show(show);
    if (logs_cmd->parsed()) return portal::portal_logs(logs);
    if (resume_cmd->parsed()) return portal::end_as_the_program_did(portal::portal_resume(resume));
    if (rm_cmd->parsed()) return portal::portal_rm(rm);
    if (gc_cmd->parsed()) return portal::portal_gc(gc);
    if (inspect_cmd->parsed()) return portal::portal_inspect(inspect);
    return 0;
}

// One top-level catch: whatever escapes a command (a bug, memory) is one
// `portal: <subject>: <problem>` line and exit status 1, never an abort.
int main(int argc, char** argv) {
    try {
        return run_portal(argc, argv);
    } catch (const portal::StoreUntrusted& e) {
        portal::log::say("store", portal::printable(e.what()));
    } catch (const portal::JobError& e) {
        portal::log::say("job", portal::printable(e.what()));
    } catch (const std::exception& e) {
        portal::log::say("internal error", portal::printable(e.what()) +
                                               " (this is a bug in Portal: please report it with the command)");
    } catch (...) {
        portal::log::say("internal error", "unknown exception (this is a bug in Portal: please report it)");
    }
    return portal::kCliRefused;
}
