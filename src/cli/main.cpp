// portal: the command-line interface over jobs.  `portal run` is portal-run.
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "portal/log.hpp"
#include "portal/portal_run.hpp"
#include "portal/resume.hpp"
#include "portal/version.hpp"

int main(int argc, char** argv) {
    const std::vector<std::string> args(argv + 1, argv + argc);
    // `portal run ...` hands everything after `run` to portal-run untouched, so the
    // program's own options (--help included) never reach this parser.
    if (!args.empty() && args.front() == "run") {
        return portal::portal_run(std::vector<std::string>(args.begin() + 1, args.end()), "portal run");
    }

    CLI::App app{"Portal: suspend a Python job that runs out of memory, resume it on a larger machine.",
                 "portal"};
    app.require_subcommand(1);
    app.set_version_flag("--version", std::string("portal ") + portal::kVersion);
    app.add_subcommand("run", "Run a program under Portal (same as portal-run); see `portal run --help`");

    portal::ResumeRequest resume;
    CLI::App* resume_cmd = app.add_subcommand(
        "resume", "Continue a suspended job here, in the foreground, from the iteration that failed");
    resume_cmd->add_option("JOB", resume.job, "The job id (a unique prefix is enough)")->required();
    resume_cmd->add_option("--mem", resume.mem,
                           "Memory the job needs, in GiB or with a unit (64, 512M); refused if this "
                           "machine has less");
    resume_cmd->add_option("--gpu", resume.gpu, "GPU model the job needs (e.g. A100); refused if absent");
    resume_cmd->add_option("--on", resume.on, "Where to run it: 'local' (this machine, the default)");
    resume_cmd->add_option("--policy", resume.policies,
                           "Set a job policy again (oom.on=false); the job's own are kept otherwise")
        ->type_name("KEY=VALUE");

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
        const bool in_resume = resume_cmd->parsed() || (!args.empty() && args.front() == "resume");
        portal::log::say(in_resume ? "resume" : "usage",
                         portal::log::lowercase_first(e.what()) +
                             (in_resume ? " (see portal resume --help)" : " (see portal --help)"));
        return 2;
    }
    if (resume_cmd->parsed()) {
        return portal::portal_resume(resume);
    }
    return 0;
}
