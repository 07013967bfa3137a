// portal_run.cpp: see include/portal/portal_run.hpp.
#include "portal/portal_run.hpp"

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <set>

#include <CLI/CLI.hpp>

#include "portal/command_line.hpp"
#include "portal/installation.hpp"
#include "portal/interpreter_choice.hpp"
#include "portal/interpreter_command.hpp"
#include "portal/interpreter_probe.hpp"
#include "portal/job_run.hpp"
#include "portal/job_store.hpp"
#include "portal/store_trust.hpp"
#include "portal/log.hpp"
#include "portal/options.hpp"
#include "portal/policy.hpp"
#include "portal/preempt.hpp"
#include "portal/size.hpp"
#include "portal/slurm.hpp"
#include "portal/slurm_requeue.hpp"
#include "portal/supervisor.hpp"
#include "portal/tripwire.hpp"
#include "portal/version.hpp"
#include "portal/job_contract.hpp"  // generated: the environment variables' names

namespace portal {

namespace {

using options::kUsageExit;

struct RunOptions {
    bool version = false;
    std::string mem;  // empty: the machine's memory
    std::string python;  // empty: PORTAL_PYTHON, the venv, conda, PATH (interpreter_choice.hpp)
    std::vector<std::string> user_code;
    std::vector<std::string> policies;
    bool requeue = false;  // inside a Slurm batch job: resume its own suspended job (slurm_requeue.hpp)
    std::string preempt_signal;  // preemption (preempt.hpp): besides SIGTERM
    double preempt_grace = preempt::kDefaultGraceSeconds;
};

void describe(CLI::App& app, RunOptions& opts) {
    const std::string name = app.get_name();
    app.description(
        "Run a Python program exactly as python3 would; when an out-of-memory error "
        "reaches one of its loops, Portal suspends it so that it can be resumed on a larger "
        "machine.\n\n  " +
        name + " [OPTIONS] SCRIPT [ARGS...]\n  " + name + " [OPTIONS] -m MODULE [ARGS...]\n  " +
        name + " [OPTIONS] -c CODE [ARGS...]");
    app.footer(
        "Portal's options come before the program; everything after SCRIPT (or -m MODULE, "
        "-c CODE) is the program's own, --help included.");
    app.add_flag("--version", opts.version, "Print Portal's version and exit");
    app.add_option("--python", opts.python,
                   "Run the program with this interpreter (a path, or a name looked up on PATH); "
                   "otherwise PORTAL_PYTHON, the active venv's or conda env's python3, the first "
                   "python3 on PATH (docs/interpreters.md)")
        ->type_name("PATH");
    app.add_option("--policy", opts.policies,
                   "Set a job policy (repeatable): oom.on=false makes every out-of-memory error "
                   "fail at once, as under python; oom.action=suspend|retry|skip (retry: resume at "
                   "once in a fresh process, at most oom.retries=N times per item, default 1; skip: "
                   "drop the failed item and go on, at most oom.max_skips=N per job, default 10); "
                   "also PORTAL_POLICY=KEY=VALUE,...")
        ->type_name("KEY=VALUE");
    app.add_option("--preempt-signal", opts.preempt_signal,
                   "Take this signal sent to portal-run (e.g. USR1, for Slurm's --signal=B:USR1@120) "
                   "as a preemption, as SIGTERM always is: the program suspends at the start of its "
                   "next loop iteration (exit 75)")
        ->type_name("SIG")
        ->check(CLI::Validator(
            [](std::string& text) {
                return preempt::parse_signal(text) > 0 ? std::string()
                                                       : options::shown(text) + ": not a signal a program can be sent (e.g. USR1)";
            },
            ""));
    app.add_option("--preempt-grace", opts.preempt_grace,
                   "Seconds a preempted program has to reach the start of a loop iteration before it "
                   "gets the signal itself, as under python (default 60)")
        ->type_name("SECONDS")
        ->check(options::grace_seconds());
    app.add_option("--user-code", opts.user_code,
                   "Treat the code under PATH as the program's own, as the script's directory, "
                   "the working directory and PYTHONPATH are (repeatable)")
        ->type_name("PATH")
        ->check(options::existing_path());
    app.add_option("--mem", opts.mem,
                   "Cap the program's memory as if this machine had SIZE (2G, 512M; a bare number "
                   "is GiB; at least 256M, at most this machine's memory): past the cap an "
                   "allocation fails and the job is suspended")
        ->type_name("SIZE")
        ->check(options::mem_size("run it on a machine that has that much, or ask for less"));
    app.add_flag("--requeue", opts.requeue,
                 "Inside a Slurm batch job: when the job starts again (requeued, preempted), resume "
                 "the job it suspended instead of starting the program anew; a preempted job asks "
                 "Slurm to requeue it (docs/slurm.md)");
}

// Options that take a separate value, so that the splitter does not mistake the
// value for the script.
std::set<std::string> options_with_value(const CLI::App& app) {
    std::set<std::string> names;
    for (const CLI::Option* opt : app.get_options()) {
        // A flag (--version, --requeue): CLI11 2.x gives it type size 1 but expects no value.
        if (opt->get_type_size() == 0 || opt->get_expected_max() == 0) {
            continue;
        }
        for (const auto& n : opt->get_lnames()) names.insert("--" + n);
        for (const auto& n : opt->get_snames()) names.insert("-" + n);
    }
    return names;
}

// The interpreter the program runs in, probed and checked against this
// installation; nullopt after saying why (one line) when there is none Portal can use.
std::optional<Interpreter> usable_interpreter(const std::string& option, const std::string& package_dir) {
    try {
        const InterpreterChoice choice =
            choose_interpreter(option.empty() ? std::nullopt : std::optional<std::string>(option), process_env);
        Interpreter python = probe_interpreter(choice, interpreter_cache_dir());
        if (const auto reason = unsupported_reason(python, package_dir)) {
            log::say("python", *reason);
            return std::nullopt;
        }
        return python;
    } catch (const NoInterpreter& e) {
        log::say("python", e.what());
    } catch (const ProbeFailed& e) {
        log::say("python", e.what());
    }
    return std::nullopt;
}

// `--version`: Portal's, and the interpreter a run would use (or why none).
void print_version(const std::string& invoked_as, const std::string& option) {
    std::cout << invoked_as << " (portal) " << kVersion << "\n";
    const auto installation = locate_installation(self_executable());
    std::string line;
    try {
        const InterpreterChoice choice =
            choose_interpreter(option.empty() ? std::nullopt : std::optional<std::string>(option), process_env);
        const Interpreter python = probe_interpreter(choice, interpreter_cache_dir());
        line = describe(python);
        if (const auto reason = installation ? unsupported_reason(python, installation->package_dir) : std::nullopt) {
            line += "; not usable: " + *reason;
        }
    } catch (const std::exception& e) {
        line = std::string("none: ") + e.what();
    }
    std::cout << "python: " << line << "\n";
}

}  // namespace

int portal_run(const std::vector<std::string>& args, const std::string& invoked_as) {
    // PORTAL_HOME absolute from here on, for the supervisor and the interpreter,
    // whatever the program chdir()s to (a relative store would move with it).
    if (const char* env = std::getenv(::portal::contract::env::kHome); env && *env) {
        setenv(::portal::contract::env::kHome, portal_home().c_str(), 1);
    }
    CLI::App app{"", invoked_as};
    RunOptions opts;
    describe(app, opts);

    SplitCommandLine split;
    try {
        split = split_command_line(args, options_with_value(app));
        std::vector<std::string> reversed(split.portal_args.rbegin(), split.portal_args.rend());
        app.parse(reversed);
    } catch (const CLI::CallForHelp&) {
        std::cout << app.help();
        return 0;
    } catch (const CLI::ParseError& e) {
        options::say_usage_problem(e, invoked_as);
        return kUsageExit;
    } catch (const UsageError& e) {
        log::say(invoked_as, std::string(e.what()) + " (see " + invoked_as + " --help)");
        return kUsageExit;
    }
    if (opts.version) {
        print_version(invoked_as, opts.python);
        return 0;
    }
    if (split.program.kind == ProgramKind::None) {
        log::say(invoked_as, "no program given: name a script, -m MODULE or -c CODE (see " +
                                 invoked_as + " --help)");
        return kUsageExit;
    }

    std::map<std::string, std::string> policies;
    try {
        policies = policies_from(std::getenv(::portal::contract::env::kPolicy), opts.policies);
    } catch (const PolicyError& e) {
        log::say("policy", std::string(e.what()) + " (see " + invoked_as + " --help)");
        return kUsageExit;
    }
    auto installation = locate_installation(self_executable());
    if (!installation) {
        return 1;
    }
    std::optional<std::string> requeue_key;
    if (opts.requeue) {
        // The Slurm job's own Portal job, if an earlier start of it left one: resumed
        // (this process becomes `portal resume`, in the job's recorded interpreter),
        // or not run again once completed.
        const RequeueStart start = start_requeued(opts.mem, resume_forwarded_options(split.portal_args));
        if (start.exit_code) return *start.exit_code;
        requeue_key = start.key;
    }
    // Before any job exists: an interpreter Portal cannot use runs nothing.
    const auto python = usable_interpreter(opts.python, installation->package_dir);
    if (!python) {
        return kUsageExit;
    }
    installation->python = python->path;
    installation->pyc_magic = python->pyc_magic;
    set_boot_policy(policies);
    // The bootstrap takes Portal's settings from the environment and removes them
    // before the program starts (python/_portal/run/boot.py).
    std::string roots;
    for (const auto& path : opts.user_code) {
        std::error_code ec;
        roots += (roots.empty() ? "" : ":") + std::filesystem::absolute(path, ec).string();
    }
    if (!roots.empty()) {
        setenv(::portal::contract::env::kUserCode, roots.c_str(), 1);
    } else {
        unsetenv(::portal::contract::env::kUserCode);
    }
    const auto argv = interpreter_argv(split.program, *installation);
    log::debug("interpreter", argv.front() + " with " + std::to_string(argv.size() - 1) + " arguments");
    // Checked while parsing (options::mem_size): a value here is a size.
    const std::optional<std::uint64_t> requested =
        opts.mem.empty() ? std::nullopt
                         : std::optional<std::uint64_t>(parse_mem_option(opts.mem, tripwire::machine_memory()));
    // Every run is a job (docs/job-store.md): recorded, its output kept, found by
    // `portal list`.  A store that cannot be written does not stop the program; it
    // only cannot be suspended.
    std::vector<std::string> command{invoked_as};
    command.insert(command.end(), args.begin(), args.end());
    std::optional<JobRun> run;
    try {
        run.emplace(JobRun::start(split.program, command, policies, requested));
    } catch (const StoreUntrusted& e) {
        log::say("store", std::string(e.what()) + "; the program runs, but cannot be suspended");
    } catch (const JobError& e) {
        log::say("job store", std::string(e.what()) + "; the program runs, but cannot be suspended");
    }
    if (run) {
        try {
            // `portal resume` runs the job in this same interpreter, or refuses.
            run->job().modify_record([&](nlohmann::json& r) { r["interpreter"] = to_record(*python); });
        } catch (const JobError& e) {
            log::say("job store", std::string(e.what()) + "; the job's interpreter is not recorded");
        }
    }
    if (run && requeue_key) {
        record_requeue_key(run->job(), *requeue_key);
    }
    preempt::Settings preemption;
    if (!opts.preempt_signal.empty()) {
        preemption.signals.push_back(preempt::parse_signal(opts.preempt_signal));
    }
    preemption.grace_seconds = opts.preempt_grace;
    preempt::configure(preemption);
    const auto cap = tripwire::memory_cap(requested);
    if (!run) {
        return supervise(argv, cap);
    }
    // Retries (--policy oom.action=retry) resume the job at once, as `portal resume` would.
    const int code = run->run_to_end(argv, cap, runs_bootstrap(argv, *installation),
                                     resume_argv(run->job().dir.string(), *installation));
    // A preempted batch job asks Slurm to run it again (slurm_requeue.hpp).
    if (requeue_key) slurm::requeue_if_preempted(run->job(), code);
    return code;
}

}  // namespace portal
