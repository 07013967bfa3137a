// supervisor.cpp: see include/portal/supervisor.hpp.
#include "portal/supervisor.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <iostream>
#include <memory>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <sys/sysinfo.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "portal/exit_status.hpp"
#include "portal/log.hpp"
#include "portal/memory_watch.hpp"
#include "portal/alloc_preload.hpp"
#include "portal/installation.hpp"
#include "portal/preempt.hpp"
#include "portal/size.hpp"
#include "portal/tripwire.hpp"

namespace portal {

namespace {

std::atomic<pid_t> g_child{0};
// The last of the signals below that reached the child at the user's request:
// forwarded by us, or sent by the terminal to the child as well.  A death by it
// needs no `portal: killed` report (python prints none either).
std::atomic<int> g_forwarded{0};
// The signal the last supervised child died of (0: it exited), for
// end_as_the_program_did().
int g_program_signal = 0;

constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
// How often a child without a pidfd is looked at.
constexpr int kNoPidfdPollMilliseconds = 50;

// A signal from the terminal (Ctrl-C, Ctrl-\, hang-up) reaches the whole foreground
// process group, the child included: forwarding it too would deliver it twice
// (a second KeyboardInterrupt in the middle of the first one's traceback).  Only a
// signal sent to the supervisor alone (kill PID) is passed on.
void forward(int signo, siginfo_t* info, void*) {
    const pid_t child = g_child.load();
    if (child <= 0) {
        return;
    }
    // Either way the child got it from the user: Ctrl-\ kills python without a
    // word, and must kill the child without a `portal: killed` report too.
    if (info != nullptr && info->si_code == SI_KERNEL) {
        g_forwarded.store(signo);
        return;
    }
    // The rescue asks the memory tripwire's watcher for room (memory_watch.hpp).
    if (signo == tripwire::memory_signal()) {
        if (info != nullptr && info->si_pid == child) tripwire::note_room_request();
        return;
    }
    // SIGTERM (--preempt-signal's): a request the wait loop passes on (preempt.hpp).
    if (preempt::note_signal(signo, info != nullptr ? info->si_pid : 0, child)) {
        return;
    }
    g_forwarded.store(signo);
    kill(child, signo);
}

// kForwarded, and with preemption its signals and the request signal (which the
// interpreter sends back when no loop can take a request).
std::vector<int> handled_signals() {
    std::vector<int> out(std::begin(kForwarded), std::end(kForwarded));
    const auto& settings = preempt::settings();
    if (settings.enabled) {
        for (int signo : settings.signals) {
            if (std::find(out.begin(), out.end(), signo) == out.end()) out.push_back(signo);
        }
        out.push_back(preempt::request_signal());
        out.push_back(tripwire::memory_signal());   // the rescue's request for room
        out.push_back(preempt::writing_signal());   // the checkpoint is being written
    }
    return out;
}

// A signal portal-run was started with ignored (nohup) stays ignored, for the
// child too, as it would be for python.
bool ignored(int signo) {
    struct sigaction current {};
    sigaction(signo, nullptr, &current);
    return !(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_IGN;
}

void install_forwarding() {
    struct sigaction sa {};
    sa.sa_sigaction = forward;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (int signo : handled_signals()) {
        if (!ignored(signo)) {
            sigaction(signo, &sa, nullptr);
        }
    }
}

sigset_t forwarded_set() {
    sigset_t set;
    sigemptyset(&set);
    for (int signo : handled_signals()) {
        sigaddset(&set, signo);
    }
    return set;
}

struct sigaction g_old_sigpipe {};

// The interpreter dies with its supervisor: SIGKILL when the supervisor's thread
// ends.  A supervisor that died between fork() and prctl() has already given the
// child to another parent (init, a subreaper): then nothing of the program runs.
void die_with(pid_t supervisor) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
        log::say("supervisor", std::string("cannot tie the program to its supervisor: ") + std::strerror(errno));
        _exit(kSupervisorGoneExit);
    }
    if (getppid() != supervisor) {
        _exit(kSupervisorGoneExit);
    }
}

// The interpreter's own descriptor of the job's lock, above the numbers a program
// usually sees (python's first open() still returns 3), or the lowest free one
// where the descriptor limit is lower.  The bootstrap reads PORTAL_LOCK_FD,
// removes it from the environment, and keeps the descriptor from its own children
// (python/_portal/run/boot.py).
constexpr int kLockFdFloor = 100;

void hand_over_lock(int job_lock_fd) {
    int fd = fcntl(job_lock_fd, F_DUPFD, kLockFdFloor);
    if (fd < 0) fd = fcntl(job_lock_fd, F_DUPFD, 0);
    if (fd < 0) {
        log::say("job lock", std::string("cannot hand the lock to the program: ") + std::strerror(errno) +
                                 "; only the supervisor holds it");
        unsetenv(kLockFdVariable);
        return;
    }
    setenv(kLockFdVariable, std::to_string(fd).c_str(), 1);
}

// The program's RLIMIT_DATA at start under a cap: the address-space ceiling
// (memory_watch.hpp), or a lower one the user already set (ulimit -d).
std::uint64_t starting_data_limit(std::uint64_t cap) {
    struct sysinfo info {};
    const std::uint64_t swap =
        sysinfo(&info) == 0 ? static_cast<std::uint64_t>(info.totalswap) * info.mem_unit : 0;
    const std::uint64_t ceiling = tripwire::address_ceiling(cap, physical_memory(), swap);
    struct rlimit limit {};
    getrlimit(RLIMIT_DATA, &limit);
    return std::min({static_cast<std::uint64_t>(limit.rlim_cur), static_cast<std::uint64_t>(limit.rlim_max),
                     ceiling});
}

// The program's RLIMIT_DATA under an address-space cap: the cap, or a lower one
// the user already set (ulimit -d).
std::uint64_t capped_data_limit(std::uint64_t cap) {
    struct rlimit limit {};
    getrlimit(RLIMIT_DATA, &limit);
    return std::min({static_cast<std::uint64_t>(limit.rlim_cur), static_cast<std::uint64_t>(limit.rlim_max), cap});
}

[[noreturn]] void exec_child(const std::vector<std::string>& argv, const sigset_t& old_mask,
                             std::optional<std::uint64_t> data_limit, std::uint64_t start_limit, bool watched, OutputTee* tee, pid_t supervisor,
                             int job_lock_fd) {
    die_with(supervisor);
    if (job_lock_fd >= 0) {
        hand_over_lock(job_lock_fd);
    } else {
        unsetenv(kLockFdVariable);
    }
    if (tee != nullptr) {
        tee->attach_child();
    }
    // Portal's bootstrap (which has the job's lock) marks where its own lines
    // start when its stderr is passed through the tee (output_tee.hpp).
    if (job_lock_fd >= 0 && tee != nullptr && tee->relays(2)) {
        setenv(kLineMarkVariable, "1", 1);
    } else {
        unsetenv(kLineMarkVariable);
    }
    sigaction(SIGPIPE, &g_old_sigpipe, nullptr);
    // The child starts with the dispositions and mask portal-run itself was given.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int signo : handled_signals()) {
        if (!ignored(signo)) {
            sigaction(signo, &dfl, nullptr);
        }
    }
    if (preempt::settings().enabled) {
        // The bootstrap takes its request signal from here (safepoint.py) and
        // removes the variable before the program starts.
        setenv(preempt::kSignalVariable, std::to_string(preempt::request_signal()).c_str(), 1);
        setenv(preempt::kWritingVariable, std::to_string(preempt::writing_signal()).c_str(), 1);
    } else {
        unsetenv(preempt::kSignalVariable);
        unsetenv(preempt::kWritingVariable);
    }
    // The memory tripwire's request (memory_watch.hpp), taken by the bootstrap
    // (safepoint.py), which removes both variables before the program starts;
    // another interpreter (preemption off) is not told of it.
    if (watched && preempt::settings().enabled) {
        setenv(tripwire::kMemorySignalVariable, std::to_string(tripwire::memory_signal()).c_str(), 1);
        setenv(tripwire::kMemoryCapVariable, std::to_string(*data_limit).c_str(), 1);
        // The allocation check (alloc_preload.hpp): one big request that would
        // take resident memory past the cap fails inside the program instead.
        if (const auto library = tripwire::alloc_library_path(self_executable())) {
            const char* user = std::getenv(tripwire::kPreloadVariable);
            setenv(tripwire::kUserPreloadVariable, tripwire::saved_user_preload(user).c_str(), 1);
            setenv(tripwire::kPreloadVariable, tripwire::preload_with(*library, user).c_str(), 1);
        }
    } else {
        unsetenv(tripwire::kMemorySignalVariable);
        unsetenv(tripwire::kMemoryCapVariable);
    }
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    // In the child only: the supervisor itself must keep the memory to report and
    // record whatever happens.  Only the soft limit: a program that knows better can
    // still raise it (resource.setrlimit), as with a limit set by the shell (the
    // watcher lowers it again near the cap); a lower one the user already set
    // (ulimit -d) stays.
    if (data_limit) {
        struct rlimit limit {};
        getrlimit(RLIMIT_DATA, &limit);
        limit.rlim_cur = static_cast<rlim_t>(start_limit);
        if (setrlimit(RLIMIT_DATA, &limit) != 0) {
            log::say("memory tripwire", std::string("cannot cap the program's memory: ") +
                                            std::strerror(errno) + "; it runs without the cap");
        }
    }
    std::vector<char*> cargv;
    cargv.reserve(argv.size() + 1);
    for (const auto& a : argv) {
        cargv.push_back(const_cast<char*>(a.c_str()));
    }
    cargv.push_back(nullptr);
    execv(cargv[0], cargv.data());
    log::say(argv[0], std::string("cannot start the interpreter: ") + std::strerror(errno) +
                          " (reinstall it: bash scripts/setup.sh)");
    _exit(127);
}

// A pending preemption's next step (preempt.hpp), after any wake-up of a wait loop.
void preempt_step(pid_t pid) {
    int delivered = 0;
    preempt::tick(pid, &delivered);
    if (delivered != 0) g_forwarded.store(delivered);
}

int poll_timeout(bool pidfd) {
    if (preempt::pending()) return preempt::kTickMilliseconds;
    return pidfd ? -1 : kNoPidfdPollMilliseconds;
}

bool wait_for(pid_t pid, int* status) {
    // A pidfd wakes the loop when the child ends, a signal (EINTR) or the tick
    // when a preemption is pending; without one (an old kernel), waitpid alone.
    const int pidfd = preempt::settings().enabled ? static_cast<int>(syscall(SYS_pidfd_open, pid, 0)) : -1;
    if (pidfd >= 0) {
        for (;;) {
            pollfd p{pidfd, POLLIN, 0};
            const int n = poll(&p, 1, poll_timeout(true));
            preempt_step(pid);
            if ((n > 0 && (p.revents & POLLIN)) || (n < 0 && errno != EINTR)) break;
        }
        close(pidfd);
    }
    while (waitpid(pid, status, 0) < 0) {
        if (errno != EINTR) {
            log::say("waitpid", std::strerror(errno));
            return false;
        }
    }
    return true;
}

// Waits for the child while passing its output on (output_tee.hpp).  A pidfd says
// when the child has ended, so that a grandchild that keeps the pipes open does
// not keep the supervisor waiting; without one (an old kernel) the child is
// looked at every 50 ms.
bool wait_while_copying(pid_t pid, OutputTee& tee, int* status) {
    const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    bool reaped = false;
    for (bool ended = false; !ended;) {
        std::vector<pollfd> fds;
        for (int fd : tee.fds()) fds.push_back({fd, POLLIN, 0});
        if (pidfd >= 0) fds.push_back({pidfd, POLLIN, 0});
        if (fds.empty()) break;  // every pipe finished: only the child is left to wait for
        const int n = poll(fds.data(), fds.size(), poll_timeout(pidfd >= 0));
        preempt_step(pid);
        if (n < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (const pollfd& p : fds) {
            if (p.fd != pidfd && (p.revents & (POLLIN | POLLHUP | POLLERR))) {
                tee.pump(p.fd);
            }
        }
        if (pidfd >= 0) {
            ended = fds.back().revents & POLLIN;
        } else {
            ended = reaped = waitpid(pid, status, WNOHANG) == pid;
        }
    }
    if (pidfd >= 0) close(pidfd);
    tee.drain();
    return reaped || wait_for(pid, status);
}

}  // namespace

int supervise(const std::vector<std::string>& argv, std::optional<std::uint64_t> data_limit, OutputTee* tee,
              int job_lock_fd, const std::function<void(pid_t)>& started) {
    g_program_signal = 0;
    preempt::next_child();
    std::cout.flush();
    std::cerr.flush();
    if (tee != nullptr && !tee->kept()) {
        tee = nullptr;
    }
    // Writing on to a reader that went away must not kill the supervisor (it has a
    // job to record); the child gets the disposition portal-run was started with.
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ignore, &g_old_sigpipe);
    // The forwarded signals are held from before the fork until the child's pid is
    // known, so that none is lost in between; the child resets them before exec.
    install_forwarding();
    const sigset_t held = forwarded_set();
    sigset_t old_mask;
    sigprocmask(SIG_BLOCK, &held, &old_mask);
    const pid_t supervisor = getpid();
    const bool watched = data_limit && tripwire::cap_kind() == tripwire::CapKind::kResident;
    const std::uint64_t start_limit =
        !data_limit ? 0 : watched ? starting_data_limit(*data_limit) : capped_data_limit(*data_limit);
    if (watched) {
        log::debug("memory tripwire", "address-space limit " + format_size(start_limit) + " (" +
                                          std::to_string(start_limit) +
                                          " bytes) until resident memory nears the cap");
    }
    const pid_t pid = fork();
    if (pid < 0) {
        log::say("fork", std::strerror(errno));
        return 1;
    }
    if (pid == 0) {
        exec_child(argv, old_mask, data_limit, start_limit, watched, tee, supervisor, job_lock_fd);
    }
    g_child.store(pid);
    // Until the child is reaped (the end of this function).
    std::unique_ptr<tripwire::MemoryWatch> watch;
    if (watched) watch = std::make_unique<tripwire::MemoryWatch>(pid, *data_limit, start_limit);
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    if (started) {
        started(pid);
    }

    int status = 0;
    if (tee != nullptr) {
        tee->attach_parent();
    }
    if (!(tee != nullptr ? wait_while_copying(pid, *tee, &status) : wait_for(pid, &status))) {
        return 1;
    }
    watch.reset();
    const ChildOutcome outcome = interpret_wait_status(status, g_forwarded.load());
    g_program_signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    if (outcome.report) {
        log::say(outcome.report->subject, outcome.report->problem);
    }
    return outcome.exit_code;
}

int program_signal() { return g_program_signal; }

int end_as_the_program_did(int exit_code) {
    const int signo = g_program_signal;
    if (signo == 0 || exit_code != kSignalExitBase + signo) {
        return exit_code;
    }
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    // A non-dumpable process writes no core, to a file or to a core_pattern pipe:
    // SIGQUIT, SIGSEGV or SIGABRT of the program must not leave a core of portal-run.
    prctl(PR_SET_DUMPABLE, 0);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(signo, &dfl, nullptr);
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, signo);
    sigprocmask(SIG_UNBLOCK, &only, nullptr);
    raise(signo);
    return exit_code;  // a signal whose default action does not end a process
}

}  // namespace portal
