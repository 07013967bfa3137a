"""Every rule that can decline a loop, in the order they run: before anything is
freed or written, so a declined error reaches the program exactly as under python
(its traceback's frames and their locals untouched, nothing flushed but what the
trial pickling below flushes: the open files of the state).

    rule                                     declined how
    ---------------------------------------  ------------------------------------------
    not out of memory / no runtime           silent: not Portal's (rescue/entry.py checks)
    oom.on=false                             silent here; the exit line says why
    its checkpoint already failed twice      silent: the job ends, outer loops do not try
    the job store is refused (store/trust.py)      reason: nothing may be written there
    a thread other than the main thread      reason
    inside a coroutine (asyncio ...)         reason
    a torch.distributed process group        reason
    a while loop's condition or else clause  reason
    inside an optimizer step                 reason
    a handler of the program's own takes it  silent: Portal does not intervene (the exit
                                             line names it, should the error end the program)
    a frame of the chain cannot be re-entered reason (capture.Decline)
    the state cannot be saved (a live        reason, found by pickling the state into
    autograd graph, an unsaveable object)    nothing (no buffer copied, nothing written)
    oom.exact=true and something in the      reason (irreversible.py: what the failed
    state will differ                        iteration did that a resume cannot undo)

decide() returns None (go on silently), a reason (str: this loop declines, the
next loop out is tried), or a Point: what the capture and the writer need.
"""
import inspect
import sys
from dataclasses import dataclass, field
from typing import Any, List

# Imported by a rescue only (suspend.py): its imports at the top cost the
# program's start-up nothing.
from _portal.bytecode import carried
from _portal.checkpoint import reducers
from _portal.checkpoint.context import PickleContext
from _portal.fidelity import grads, irreversible, iteration, rng_check, stores_changed
from _portal.rescue import capture, handlers, point_state, safepoint, tracebacks
from _portal.state import plugins, threading_state
from _portal.store import trust as store

_CO_ASYNC = inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE
# What to do about an object the checkpoint cannot hold (the last words of a decline).
UNSAVEABLE_ADVICE = ("Portal cannot save it: close or drop it before the loop, keep it out of "
                     "the loop's state, or give its class __getstate__/__setstate__ that "
                     "leave it out and make it again")

@dataclass
class Point:
    """A loop that will be the resume point."""
    frames: List[Any]
    site: Any
    state: Any                          # the ProgramState to write
    roots: dict                         # {description: object}, for messages
    marks: Any = None                   # the iteration's start it is rolled back to (fidelity/iteration.py)
    will_differ: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)   # the report's extra lines (suspend.py)
    cut: List[Any] = field(default_factory=list)     # tensors the write saved as leaves (suspend.py)
    callee: List[str] = field(default_factory=list)  # what a callee did that stays done (_callee_changed)


def decide(runtime, loop_frame, loop_line, exc, roll_back=True):
    """The program's state is built once, here (point_state.make), and written as
    it is if this loop is the point, rolled back to the marks of the iteration's
    start (roll_back=False: a preemption's safe point, whose iteration has not
    started: nothing to roll back)."""
    if id(exc) in runtime.capture_failed:
        return None
    reason = _store(runtime)
    if reason:
        return reason
    for rule in (_thread, _coroutine, _distributed):
        reason = rule(loop_frame)
        if reason:
            return reason
    if not capture.raised_in_body(loop_frame, loop_line, exc):
        return (f"raised outside the body of the while loop at {loop_frame.f_code.co_filename}:"
                f"{loop_line} (in its condition or else clause)")
    step = _inside_optimizer_step(exc)
    if step:
        return f"raised inside an optimizer step ({step}): the weights may be half updated"
    taking = handlers.handler_taking(loop_frame, exc)
    if taking and not _portal_own(exc):
        _left_to_handler(runtime, exc, *taking)
        return None
    try:
        frames, site = capture.capture_chain(loop_frame, loop_line, runtime.main_code(),
                                             sys.modules["__main__"].__dict__)
    except capture.Decline as d:
        return str(d)
    threading_state.freeze()   # restartable threads held at their wait until written (or thawed)
    point = _saveable_point(runtime, loop_frame, loop_line, exc, frames, site, roll_back)
    if not isinstance(point, Point):
        threading_state.thaw()
    return point


def _saveable_point(runtime, loop_frame, loop_line, exc, frames, site, roll_back):
    state, roots, marks = point_state.make(runtime, loop_frame, loop_line, frames, site, roll_back)
    plugins.prepare()                       # in the program's thread: the trial pickles in another
    saved = _trial(runtime, state, roots, marks)   # docs/fidelity.md: its cost
    if isinstance(saved, str):
        return saved
    threading_state.thaw_unsaved()          # only the threads the state holds stay held
    seen = plugins.will_differ(roots, saved)
    # A preemption's point is an iteration that has not started: nothing of it to undo.
    differ = [] if _portal_own(exc) else (irreversible.will_differ(loop_frame, loop_line, roots, saved,
                                                                     runtime.is_program_file)
                                          + rng_check.will_differ(loop_frame, loop_line, roots, saved)
                                          + _changed_variables(loop_frame, loop_line, site, exc)
                                          + _changed_objects(runtime, loop_frame, loop_line, site, exc, saved)
                                          + seen)
    if not _portal_own(exc):   # gradients a backward of the failed iteration added to (grads.py)
        differ = differ + grads.will_differ(loop_frame.f_code, loop_line, saved)
    callee = _callee_changed(runtime, loop_frame, exc)   # the report's line, or under oom.exact a difference
    if runtime.policy.get("oom.exact") == "true" and differ + callee:
        return "with oom.exact=true, not a point where something will differ: " + "; ".join(differ + callee)
    reason = plugins.at_suspension(saved)
    if reason:
        return reason
    return Point(frames, site, state, roots, marks, differ, callee=callee)


def _left_to_handler(runtime, exc, where, matches):
    """Portal does not intervene; should the error end the program all the same
    (the handler raised it again), the exit line says where it was left, never
    that no loop met it (runtime.explain_failure)."""
    clause = "whose except clause matches it" if matches else \
        "whose except clause Portal cannot evaluate (it may match)"
    # One slot, not an entry per error: a program that handles its errors
    # (halving the batch) leaves nothing behind that a later error of the same
    # id could be taken for; the innermost traceback entry, which stays the same
    # object however far the error goes on, tells this error from such a one.
    runtime.left_to_handler = (id(exc), id(_innermost(exc.__traceback__)),
                               f"it was left to the program's own handler at {where}, {clause}: "
                               f"that handler did not stop it")


def _innermost(tb):
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb


def _changed_variables(loop_frame, loop_line, site, exc):
    """[text] for each variable of the loop's frame that the failed iteration may
    have rebound before the error and that its rerun reads (bytecode/carried.py):
    the rerun starts from the changed value.  A for loop's targets, which a
    marked loop in a function rolls back (iteration.py), are not among them."""
    tb = tracebacks.loop_entry(exc, loop_frame)
    if tb is None:
        return []
    code = loop_frame.f_code
    marks = iteration.marks_of(code, loop_line) or {}
    rolled_back = set(marks.get("targets") or ()) if code.co_flags & _CO_OPTIMIZED else set()
    filename = code.co_filename
    return [f"the failed iteration may already have changed '{name}' ({filename}:{line}) before the "
            f"error: it runs again from the changed value"
            for name, line in carried.changed_before(code, site, tb.tb_lasti)
            if name not in rolled_back and not stores_changed.rolled_back(loop_frame, name, marks)]


_CO_OPTIMIZED = 0x1   # inspect.CO_OPTIMIZED: a function's frame (its targets are fast locals)


def _changed_objects(runtime, loop_frame, loop_line, site, exc, saved):
    """[text] for each store into an object of the saved state (an attribute, an
    item, a container's append/extend/update ...) that the failed iteration may
    have made before the error: the rerun makes it again; and for the DataLoader
    iterators a comprehension of a loop without marks made or advanced
    (stores_changed.py)."""
    try:
        return (stores_changed.will_differ(loop_frame, site, exc, saved)
                + stores_changed.unmarked_loaders(runtime, loop_frame, loop_line, exc, saved))
    except Exception:  # noqa: BLE001 - a program's object that cannot be read: never a failed rescue
        return []


def _callee_changed(runtime, loop_frame, exc):
    """[text] where the error came from inside a function of the program's own
    that may have changed something before it (stores_changed.callee_note: the
    report's line otherwise): under oom.exact=true that is a difference too (the
    loop of a train() that declined, passed over for the epoch loop around it, ran
    its steps; they run again on what they changed)."""
    if _portal_own(exc):
        return []
    note = stores_changed.callee_note(exc, loop_frame, runtime.is_program_file)
    return [note] if note else []


def _portal_own(exc):
    """A request of Portal's own (safepoint.py's Preempted), taken where an
    iteration starts: no handler of the program's was written for it, so none
    takes it, and the iteration has done nothing that will differ."""
    return safepoint.is_preempted(exc)


def _store(runtime):
    """Why this run cannot write to the job store (then nothing is written: no
    job, no key, no checkpoint), or None."""
    problem = store.problem()
    if problem is not None:
        return f"the job store cannot be trusted: {problem}"
    if not runtime.job_dir and store.supervised():
        return (f"portal-run could not make this run a job in the store {store.home()} "
                f"(its message above says why), so it cannot be suspended")
    return None


def _thread(loop_frame):
    threading = sys.modules.get("threading")
    if threading is not None and threading.current_thread() is not threading.main_thread():
        return "raised in a thread other than the main thread"
    return None


def _coroutine(loop_frame):
    frame = loop_frame
    while frame is not None:
        if frame.f_code.co_flags & _CO_ASYNC:
            return (f"the loop runs inside the coroutine {frame.f_code.co_name}() "
                    f"({frame.f_code.co_filename}:{frame.f_code.co_firstlineno}), driven by an event "
                    f"loop: Portal cannot suspend and resume a coroutine")
        frame = frame.f_back
    return None


def _distributed(loop_frame):
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return None
        group = f"backend {dist.get_backend()}, rank {dist.get_rank()} of {dist.get_world_size()}"
    except Exception:  # noqa: BLE001 - a half set-up group: still one
        group = "a process group"
    return (f"a torch.distributed process group is initialised ({group}): Portal cannot yet "
            f"suspend all ranks together, and one rank's checkpoint alone could not be resumed")


def _inside_optimizer_step(exc):
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename.replace("\\", "/")
        if "/torch/optim/" in filename:
            return f"{filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    return None


class _Nowhere:
    """The trial's output: counts, keeps nothing."""
    error = None

    def write(self, data):
        return len(data)


def _trial(runtime, state, roots, marks):
    """Pickle the state into nothing, as the writer will (same reducers, buffers
    left where they are): a reducer that declines (a live autograd graph) or an
    object that cannot be saved declines this loop now, while the frames still
    hold what python would have left in them.  A trial that itself runs short of
    memory says nothing: the writer then tries, after freeing (suspend.py).
    Returns the reason, or the ids of the objects the checkpoint will hold (None
    when the trial could not tell)."""
    # a trial: a reducer with a costly side effect (copying a device storage to the
    # host: torch/objects.py) skips it
    exact, inherited = plugins.reducers(PickleContext(trial=True, marks=marks))
    try:
        pickler = reducers.Pickler(_Nowhere(), registry=runtime.registry,
                                   buffer_callback=_discard, reducers=exact, subclass_reducers=inherited)
        pickler.dump_state(state, roots)
        return set(pickler.memo.copy())
    except reducers.DeclineLoop as d:
        return f"its state holds {d}"
    except reducers.Unsaveable as u:   # the same object fails every try: never retried
        return f"its state holds {u}; {UNSAVEABLE_ADVICE}"
    except (MemoryError, RecursionError, RuntimeError, OSError):
        return None
    finally:
        pickler = None


def _discard(buffer):
    return None
