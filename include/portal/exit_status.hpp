// exit_status.hpp: what portal-run exits with, given how the interpreter process ended.
#pragma once

#include <optional>
#include <string>

#include "portal/job_contract.hpp"

namespace portal {

// What a suspended job's process exits with (EX_TEMPFAIL: try again elsewhere);
// from the job-record contract (contract/job_record.json).
constexpr int kSuspendedExit = contract::kSuspendedExitStatus;
// A death by signal N is status 128+N, as a shell shows it ($?).
constexpr int kSignalExitBase = 128;

struct Report {
    std::string subject;
    std::string problem;
};

struct ChildOutcome {
    int exit_code = 0;            // what the supervisor exits with
    std::optional<Report> report; // a `portal: subject: problem` line for stderr, when one helps
};

// `wait_status` is waitpid()'s status; `forwarded_signal` is the last signal the
// user sent the child, forwarded by the supervisor or typed at the terminal (0 if
// none): a death by that signal is the user's doing and needs no explanation.  A child killed by signal N gives
// kSignalExitBase+N, as a shell reports it.
ChildOutcome interpret_wait_status(int wait_status, int forwarded_signal);

// "SIGKILL" for 9, "signal 77" for an unnamed one.
std::string signal_name(int signo);

}  // namespace portal
