"""Safe points: a request to suspend, taken at the next start of an iteration of a
wrapped loop of the user's code (docs/preemption.md).

    request(reason)     note a request; the program suspends at its next safe point

A safe point is the first instruction of a wrapped loop's body (instrument.py),
in a frame of the user's code: the place a resume continues from, where nothing
of the iteration has run yet, so no library code and no optimizer step is ever
interrupted.  A normal run pays nothing: no trace function is set until a
request comes.  On a request, sys.settrace() is set for the main thread and
f_trace on the frames of the user's instrumented code that are running; the
global function gives a local one only to code with a wrapped loop (library
calls pay one 'call' event each, nothing per line).  The local function, at a
'line' event on a body's first instruction, removes all tracing and raises
Preempted there: the loop's handler hands it to the rescue, which suspends the
job as for an out-of-memory error (reason 'preempted', exit 75), without
skipping or retrying, and without rolling anything back (nothing of the
iteration ran).

The channel from portal-run (src/launcher/supervisor.cpp): a real-time signal
whose number PORTAL_PREEMPT_SIGNAL gives (removed from the environment before
the program starts); its handler only calls request().  The supervisor sends
it when portal-run itself receives SIGTERM (or --preempt-signal's signal) and
the program has no handler of its own for that signal; after --preempt-grace
seconds without a suspension it delivers the original signal.  When no loop can
be suspended (every loop declined the request), the program tells the
supervisor with the same signal (to its parent) and waits for the original one,
so it ends as it would under python, at once rather than after the grace.

The memory tripwire's channel (src/launcher/memory_watch.cpp): when the
program's resident memory passes the cap between two looks of the supervisor's
watcher (one allocation written at once), a second real-time signal, named by
PORTAL_MEMORY_SIGNAL (the cap in bytes in PORTAL_MEMORY_CAP), asks for a
suspension with the reason 'memory'.  It has no signal to fall back on: when no
loop can take it, the request is dropped and the program goes on as under python.

A program with a trace function of its own (a debugger, coverage) is not traced
over: its safe point is never taken, and the grace decides.
"""
import os
import sys

import _signal as _csignal   # the C module: `signal` would import enum at every start-up
from _portal import RESCUE_NAME   # instrument.py's handler calls it
from _portal import job_contract  # the environment variables' names (contract/job_record.json)

SIGNAL_VARIABLE = job_contract.ENV_PREEMPT_SIGNAL   # set by portal-run (supervisor.cpp)
WRITING_VARIABLE = job_contract.ENV_WRITING_SIGNAL   # the signal that says a checkpoint is being written
PREEMPTED = "preempted"                      # the reason a preemption is recorded with
MEMORY_SIGNAL_VARIABLE = job_contract.ENV_MEMORY_SIGNAL   # set by portal-run (supervisor.cpp)
MEMORY_CAP_VARIABLE = job_contract.ENV_MEMORY_CAP
MEMORY = "memory"                            # resident memory passed the tripwire's cap
# How long a program whose request no loop could take waits for the supervisor's
# original signal before ending by itself (exit status 1, as an uncaught error).
WAIT_FOR_SIGNAL_SECONDS = 120


class Preempted(Exception):
    """Raised at a safe point; an Exception so that the loop wrap catches it."""

    def __init__(self, reason=PREEMPTED):
        super().__init__(reason)
        self.reason = reason

    def __str__(self):
        return self.reason


_pending = [None]           # the reason of a request not yet taken
_signal = [None]            # the request signal portal-run named
_writing = [None]           # the signal that tells portal-run a checkpoint is being written
_starts = {}                # code object -> frozenset of its loop bodies' first offsets
_saved_hook = [None]
_runtime = [None]           # runtime.py's Runtime: its portal_modules, declined
_deferred = [False]         # a request made before the program's main code ran
_memory_cap = [None]        # the memory tripwire's cap in bytes (None: no cap)
_memory_signal = [None]     # its signal (the watcher's request; the rescue's for room)


def _portal_modules():
    """Portal's modules back in sys.modules (the program does not see them; a
    rescue puts them back the same way), for the imports below."""
    runtime = _runtime[0]
    if runtime is not None:
        sys.modules.update(runtime.portal_modules)


def install(runtime=None):
    """Arm the channel from portal-run (runtime.py, before the program starts)."""
    _runtime[0] = runtime
    memory = os.environ.pop(MEMORY_SIGNAL_VARIABLE, "")
    cap = os.environ.pop(MEMORY_CAP_VARIABLE, "")
    if memory.isdigit() and cap.isdigit():
        try:
            _csignal.signal(int(memory), _on_memory)
            _memory_cap[0] = int(cap)
            _memory_signal[0] = int(memory)
        except (ValueError, OSError):
            pass
    writing = os.environ.pop(WRITING_VARIABLE, "")
    value = os.environ.pop(SIGNAL_VARIABLE, "")
    if writing.isdigit():
        _writing[0] = int(writing)
    if not value.isdigit():
        return
    signo = int(value)
    try:
        _csignal.signal(signo, _on_signal)
    except (ValueError, OSError):
        return
    _signal[0] = signo


def _on_signal(signo, frame):
    request(PREEMPTED, frame)


def _on_memory(signo, frame):
    # Past the cap the watcher lets the program allocate nothing more: the
    # rescue's reserve (rescue/entry.py) gives the request its room (its frames'
    # loops found, codemap imported).
    # During a rescue (the rescue's own allocations passed the cap) there is
    # nothing to ask: it suspends the job, or declines and the program goes on;
    # its imports may be half done, which the request's own imports would trip on.
    runtime = _runtime[0]
    rescuer = getattr(runtime, "rescuer", None)
    if rescuer is not None:
        if rescuer.rescuing:
            return
        rescuer.release_reserve()
    try:
        request(MEMORY, frame)
    except Exception:  # noqa: BLE001 - it cannot be armed now: dropped, as with no loop to take it
        if _pending[0] == MEMORY:
            _pending[0] = None
            _stop_tracing()


def writing():
    """Tell portal-run that the program is at its safe point and writes its
    checkpoint: the preemption grace stops counting (the supervisor watches the
    write's progress instead, src/launcher/preempt.cpp)."""
    if _writing[0] is not None:
        try:
            os.kill(os.getppid(), _writing[0])
        except OSError:
            pass


def memory_cap():
    """The memory tripwire's cap in bytes, or None."""
    return _memory_cap[0]


def ask_for_room():
    """Ask the resident cap's watcher (the supervisor, this process's parent) to
    give the address-space limit its ceiling back and hold it (rescue/entry.py; sent
    again, it watches as before).  False when there is no watcher to ask."""
    if _memory_signal[0] is None:
        return False
    try:
        os.kill(os.getppid(), _memory_signal[0])
    except OSError:
        return False
    return True


def is_preempted(exc):
    return isinstance(exc, Preempted)


def pending():
    return _pending[0]


def request(reason, frame=None):
    """Note a request: the program suspends at its next safe point."""
    if _pending[0] is not None:
        return
    _pending[0] = reason
    if sys.gettrace() is not None:
        return   # the program's own tracer: not replaced (the grace decides)
    frame = frame if frame is not None else sys._getframe(1)
    _portal_modules()
    reachable = started = False
    while frame is not None:
        if _body_starts(frame.f_code):
            frame.f_trace = _local
            frame.f_trace_lines = True
        reachable = reachable or _has_loops(frame.f_code)
        started = started or _is_main(frame.f_code)
        frame = frame.f_back
    if not reachable and started:
        # No running code of the program's has a loop, here or in a function it
        # defines (a script that only sleeps): no safe point can come; the
        # supervisor delivers the signal now, silently, as under python (a
        # memory request is dropped: the program goes on).
        reason, _pending[0] = _pending[0], None
        _give_up(reason)
        return
    # Before the program's main code runs (the interpreter is starting, a resume
    # is restoring), the main code's first call tells (_global).
    _deferred[0] = not started
    _saved_hook[0] = sys.excepthook
    sys.excepthook = _escaped
    sys.settrace(_global)


_trees = {}


def _has_loops(code):
    """Whether `code`, or a function or class it defines, has a wrapped loop."""
    found = _trees.get(code)
    if found is None:
        found = RESCUE_NAME in code.co_names or any(
            _has_loops(c) for c in code.co_consts if isinstance(c, type(code)))
        _trees[code] = found
    return found


def _give_up(reason):
    """Tell the supervisor that no loop can take the request: it delivers the
    original signal now (supervisor.cpp).  A memory request has none."""
    if reason == PREEMPTED and _signal[0] is not None:
        try:
            os.kill(os.getppid(), _signal[0])
        except OSError:
            pass


def _body_starts(code):
    """The first offsets of the bodies of the wrapped loops of `code` (empty for
    code that is not the user's: it has no wrapped loop)."""
    found = _starts.get(code)
    if found is None:
        found = frozenset()
        if RESCUE_NAME in code.co_names:
            found = frozenset(_find_starts(code))
        _starts[code] = found
    return found


def _find_starts(code):
    # Portal's modules are hidden from the program (boot.py): a request made
    # before the start-up hid them (a resume still restoring) finds them gone by
    # the time this runs, from the trace function.
    _portal_modules()
    from _portal.bytecode import codemap
    # the loops' lines, from their rescue calls in the version's shape (3.13's
    # module level: LOAD_NAME, PUSH_NULL, then the line's LOAD_CONST)
    for line in codemap.rescue_lines(code):
        try:
            for site in codemap.find_loops(code, line):
                yield site.body_start
        except codemap.NotResumable:
            continue


def _is_main(code):
    runtime = _runtime[0]
    try:
        return runtime is not None and code.co_filename == runtime.main_filename
    except Exception:   # noqa: BLE001 - a runtime without a main file yet
        return False


def _global(frame, event, arg):
    if _deferred is None:   # the interpreter's exit cleared this module: the program has ended
        return None
    if event == "call" and _deferred[0] and _is_main(frame.f_code):
        _deferred[0] = False
        if not _has_loops(frame.f_code):
            reason, _pending[0] = _pending[0], None
            sys.settrace(None)
            _give_up(reason)
            return None
    if event == "call" and _body_starts(frame.f_code):
        frame.f_trace_lines = True
        return _local
    return None


def _local(frame, event, arg):
    if _pending is None:    # the interpreter's exit cleared this module
        return None
    if event == "line" and _pending[0] is not None and frame.f_lasti in _body_starts(frame.f_code):
        _stop_tracing()
        raise Preempted(_pending[0])
    return _local


def _stop_tracing():
    sys.settrace(None)
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_trace is _local:
            frame.f_trace = None
        frame = frame.f_back


def taken():
    """The rescue suspends for the request: forget it (the process exits)."""
    _pending[0] = None


def _escaped(exc_type, exc, tb):
    """sys.excepthook while a request is pending: a Preempted that no loop could
    take ends the program as the signal would have under python."""
    hook = _saved_hook[0] or sys.__excepthook__
    if not isinstance(exc, Preempted):
        return hook(exc_type, exc, tb)
    runtime = _runtime[0]
    reasons = list(dict.fromkeys((runtime.declined.get(id(exc), ()) if runtime else ())))
    why = "; ".join(reasons) or "no loop of the program's own was running"
    if exc.reason == MEMORY:
        sys.stderr.write(f"portal: memory tripwire: resident memory passed the cap and no loop could be "
                         f"suspended ({why}): the program ends here\n")
        sys.stderr.flush()
        return None
    sys.stderr.write(f"portal: preempt: no loop could be suspended ({why}): the program ends by "
                     f"the signal, as under python\n")
    sys.stderr.flush()
    if _signal[0] is not None:
        _give_up(PREEMPTED)      # the supervisor delivers the signal now
        import time
        deadline = time.monotonic() + WAIT_FOR_SIGNAL_SECONDS
        while time.monotonic() < deadline:
            time.sleep(1)
    return None
