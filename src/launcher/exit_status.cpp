// exit_status.cpp: see include/portal/exit_status.hpp.
#include "portal/exit_status.hpp"

#include "portal/log.hpp"

#include <csignal>
#include <cstring>
#include <sys/wait.h>

namespace portal {

std::string signal_name(int signo) {
    const char* abbrev = sigabbrev_np(signo);
    return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(signo);
}

ChildOutcome interpret_wait_status(int wait_status, int forwarded_signal) {
    ChildOutcome out;
    if (WIFEXITED(wait_status)) {
        out.exit_code = WEXITSTATUS(wait_status);
        return out;
    }
    if (!WIFSIGNALED(wait_status)) {
        out.exit_code = 1;  // stopped/continued never reach here: we wait for termination only
        return out;
    }
    const int sig = WTERMSIG(wait_status);
    out.exit_code = kSignalExitBase + sig;
    if (sig == forwarded_signal) {
        return out;
    }
    // python dies by SIGINT itself after an unhandled KeyboardInterrupt, having
    // printed the traceback: that is python's own behaviour, not news.
    if (sig == SIGINT) {
        return out;
    }
    if (sig == SIGKILL) {
        out.report = Report{"killed",
                            "the program was killed by SIGKILL, most likely by the operating "
                            "system's out-of-memory killer; no Python error was raised, so there "
                            "was nothing to rescue (`dmesg | grep -i oom` tells)"};
    } else {
        out.report = Report{"killed", "the program was killed by " + signal_name(sig) + " (" +
                                          log::lowercase_first(strsignal(sig)) + ")" +
                                          (WCOREDUMP(wait_status) ? ", core dumped" : "")};
    }
    return out;
}

}  // namespace portal
