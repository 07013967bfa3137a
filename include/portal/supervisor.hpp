// supervisor.hpp: the process that starts the interpreter and waits for it.
//
// portal-run stays as a small parent so that a death the program cannot report
// itself (SIGKILL from the kernel's OOM killer) is still reported, and so that job
// records and policies have a place to live.  It forwards SIGINT, SIGTERM, SIGHUP
// and SIGQUIT sent to it, and ends as the child did: with its exit status, or -
// once the job is recorded - killed by the same signal (end_as_the_program_did).
//
// The interpreter never outlives its supervisor: it is started with
// PR_SET_PDEATHSIG = SIGKILL (and checks, after setting it, that the supervisor
// is still its parent), so SIGKILL of portal-run or of `portal resume` ends the
// program too, as SIGKILL of python would.  With a job lock, the interpreter
// holds the lock as well (job_lock.hpp) until it is gone.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

#include "portal/output_tee.hpp"
#include "portal/job_contract.hpp"  // generated: the environment variables' names

namespace portal {

// What the child exits with when its supervisor died before it could start (the
// parent check after PR_SET_PDEATHSIG failed): nothing of the program ran.
constexpr int kSupervisorGoneExit = 127;
// The environment variable that names the interpreter's descriptor of the job's lock.
constexpr const char* kLockFdVariable = ::portal::contract::env::kLockFd;

// Runs argv[0] (an absolute path) with argv, waits, reports, and returns the exit
// code portal-run must exit with (128+N for a death by signal N, as a shell
// reports it; end_as_the_program_did() then dies the same way).  With
// `data_limit`, the child's RLIMIT_DATA is set to it before exec (the memory
// tripwire, see tripwire.hpp).  With `tee`, the program's stdout and stderr are
// also kept in the job's log.  With `job_lock_fd` (a JobLock's descriptor), the
// interpreter gets its own duplicate of it, not close-on-exec, named in
// PORTAL_LOCK_FD.  `started` is called in the supervisor with the child's pid.
int supervise(const std::vector<std::string>& argv,
              std::optional<std::uint64_t> data_limit = std::nullopt, OutputTee* tee = nullptr,
              int job_lock_fd = -1, const std::function<void(pid_t)>& started = {});

// The signal the last program supervise() ran died of (0: it exited).
int program_signal();

// `exit_code` if the last program supervise() ran did not die of a signal (or
// exit_code is not that death's 128+N); otherwise does not return: the process
// flushes its output, resets the signal to its default action, unblocks it and
// raises it on itself, so that its parent sees the death python's parent would
// (WIFSIGNALED; a shell still shows 128+N).  The supervisor never dumps core for
// it (it makes itself non-dumpable first): the program's core, if any, is the
// program's.  Call it last, once the job is recorded and its lock released.
int end_as_the_program_did(int exit_code);

}  // namespace portal
