// preempt.hpp: preemption (docs/preemption.md).
//
// SIGTERM sent to the supervisor (and the signal --preempt-signal names, e.g.
// SIGUSR1 for Slurm's --signal=B:USR1@120) is not passed on as it is: the
// supervisor sends the interpreter a request (kRequestSignal, a real-time signal
// whose handler, python/_portal/rescue/safepoint.py, only notes it), and the program
// suspends at the next start of an iteration of one of its loops, reason
// `preempted`, exit 75.  The request waits until the interpreter catches the
// request signal (its bootstrap installs the handler); a program that handles the
// original signal itself gets it as it is (its handler is honoured).  With no
// suspension within the grace (default 60 s), or when the interpreter says that no
// loop could take the request (the request signal sent back to the supervisor),
// the original signal is delivered: the program ends as under python.  Further
// signals while a request is pending change nothing (the checkpoint being written
// is committed atomically or not at all).
#pragma once

#include <csignal>
#include <string>
#include <sys/types.h>
#include <vector>
#include "portal/job_contract.hpp"  // generated: the environment variables' names

namespace portal::preempt {

// The environment variable that tells the interpreter the request signal's number.
constexpr const char* kSignalVariable = ::portal::contract::env::kPreemptSignal;
// ... and the number of the signal it sends back to say that it has reached its
// safe point and is writing its checkpoint (python/_portal/rescue/suspend.py): from
// then on the grace no longer counts; the write is watched for progress instead.
constexpr const char* kWritingVariable = ::portal::contract::env::kWritingSignal;
constexpr double kDefaultGraceSeconds = 60.0;
// A checkpoint write whose process neither writes a byte nor uses CPU for this
// long (or the grace, if longer) is taken as hung: the original signal is delivered.
constexpr double kWriteStallSeconds = 60.0;
// How often a pending request is looked at (the child's handlers, the grace).
constexpr int kTickMilliseconds = 100;

// The real-time signal a request travels on (SIGRTMIN + 4, above those glibc
// and threading libraries take for themselves).
int request_signal();
// The real-time signal the interpreter sends its supervisor when it writes a
// checkpoint (SIGRTMIN + 6; + 5 is the memory tripwire's).
int writing_signal();

// Whether process `pid` catches `signo` (its /proc/PID/status SigCgt mask): a
// request signal is sent only to an interpreter that takes it.
bool catches(pid_t pid, int signo);

struct Settings {
    bool enabled = true;                // off: every signal is forwarded as it is
    std::vector<int> signals{SIGTERM};  // SIGTERM always counts
    double grace_seconds = kDefaultGraceSeconds;
};

// portal-run's options (--preempt-signal, --preempt-grace); before supervise().
void configure(const Settings& settings);
const Settings& settings();

// "USR1", "SIGUSR1" or "10" -> the number; -1 when it is not a signal a program
// may be sent (KILL, STOP and unknown names are refused).
int parse_signal(const std::string& text);

// In the signal handler (async-signal-safe): whether `signo`, sent by `sender`,
// is taken as a preemption (true: not to be forwarded as it is).
bool note_signal(int signo, pid_t sender, pid_t child);

// In the supervisor's wait loop, every kTickMilliseconds while pending():
// sends the request, or the original signal (then `forwarded` is set to it):
// past the grace, unless the interpreter said it is writing its checkpoint and
// the write still progresses (the bytes it wrote, its CPU time: /proc/PID/io,
// /proc/PID/stat) within kWriteStallSeconds.
void tick(pid_t child, int* forwarded);
bool pending();
// Nothing pending.
void reset();
// For the next child (the first, or a retry): a request already pending stays
// so, its grace counted from now; nothing else of the last child's is kept.
void next_child();
// From now until supervise() installs its own handlers: a preemption signal is
// held as a pending request for the child to come, not the end of the command
// (`portal resume` checks the job and its interpreter first).
void hold_until_supervised();

}  // namespace portal::preempt
