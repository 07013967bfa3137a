"""From an out-of-memory error in a loop to a suspended job (rescue/entry.py's stages 1-5).

_rescue() is the driver: decide (decide.py: every rule, nothing freed yet), make
the job, free the frames inside the loop, write the checkpoint, record the job,
report and exit.  Nothing declines once the frames are freed: a write that fails
twice (_failed) ends the job with the program's own error, as without Portal.
"""
import gc
import linecache
import os
import shutil
import sys
import time
import traceback

# Imported by a rescue only (runtime.py imports this module then): its imports
# at the top cost the program's start-up nothing.
from _portal import job_contract  # the environment variables' names (contract/job_record.json)
from _portal.bytecode import codemap
from _portal.checkpoint import write as checkpoint
from _portal.checkpoint.context import PickleContext
from _portal.checkpoint.progress import size_text
from _portal.checkpoint.reducers import DeclineLoop, Unsaveable
from _portal.fidelity import comprehensions, grads
from _portal.job_contract import SUSPENDED_EXIT_STATUS  # contract/job_record.json, generated
from _portal.rescue import decide, hint, policy as oom_policy, retry, safepoint, shortage, skip
from _portal.rescue import tracebacks
from _portal.rescue.decide import UNSAVEABLE_ADVICE
from _portal.run import lines
from _portal.state import plugins, threading_state, workers
from _portal.store import jobs, trust as store

SUSPENDED_EXIT = SUSPENDED_EXIT_STATUS  # EX_TEMPFAIL: try again later (on a larger machine)


def _say(subject, problem):
    lines.start()   # on a line of its own, after a progress bar's unfinished line too
    sys.stderr.write(f"portal: {subject}: {problem}\n")


def _decline(runtime, exc, reason, loop=None):
    """loop: (its frame, "the loop at FILE:LINE in F()") where this loop's own
    rules declined it (decide.py): should a loop further out be the point, its
    report says why this one was passed over."""
    runtime.declined.setdefault(id(exc), []).append(reason)
    if loop is not None:
        runtime.passed_over.setdefault(id(exc), []).append((id(loop[0]), loop[1], reason))
    threading_state.thaw()   # the threads decide.py held at their wait go on (fidelity.md)


# ---- 3. free ------------------------------------------------------------------------------

def _free_inner_frames(exc, loop_frame):
    """Clear the frames the error passed through inside the loop (the activations,
    gradients and temporaries they hold), keeping the traceback's text."""
    for tb in tracebacks.inside(exc, loop_frame):
        try:
            tb.tb_frame.clear()
        except RuntimeError:
            pass  # still executing (cannot happen for frames the error left)
    if "torch" in sys.modules:   # what those frames held on a GPU goes back to the driver
        from _portal.torch import objects as torch_state
        torch_state.release_cached_device_memory()


def _free_what_can_be_freed():
    """Before each try at the checkpoint: collect the cycles that the cleared frames
    (or a failed try) left, and drop the source lines the traceback's text read."""
    linecache.clearcache()
    gc.collect()


class _TestFault:
    """PORTAL_TEST_FAULT=checkpoint-memory@N, for Portal's own tests only: the first
    N tries at the checkpoint run out of memory half-way, at their first write into
    state.pickle (the temporary checkpoint directory and a partial file exist by
    then).  It stands for a shortage that goes away between the tries, which a
    test cannot bring about on cue with real memory; a writer really short of
    memory on both tries is tested for real (tests/e2e/test_capture_failure.py)."""

    def __init__(self, checkpoint, attempt):
        spec = os.environ.get(job_contract.ENV_TEST_FAULT, "")
        fails = spec.startswith("checkpoint-memory@") and attempt <= int(spec.split("@")[1])
        self.checkpoint = checkpoint if fails else None

    def __enter__(self):
        if self.checkpoint is not None:
            self.real = self.checkpoint._write

            def out_of_memory(fd, data):
                raise MemoryError()
            self.checkpoint._write = out_of_memory

    def __exit__(self, *exc_info):
        if self.checkpoint is not None:
            self.checkpoint._write = self.real


def _frame_line(fs, main_code):
    """The source line of the instruction a saved frame continues at."""
    line = codemap.line_at(main_code if fs.function is None else fs.function.__code__, fs.offset)
    return fs.line if line is None else line


def _message(error):
    text = str(error)
    return text if text and not isinstance(error, MemoryError) else f"{type(error).__name__}: {text}".rstrip(": ")


def rescue(runtime, loop_frame, loop_line, exc):
    """Suspend the job at this loop (exits), skip the item (returns True: the loop
    goes on with the next one), or decline (returns None): the error goes on."""
    try:
        return _rescue(runtime, loop_frame, loop_line, exc) is True
    except Exception as error:  # noqa: BLE001
        # The rescue itself failed (short of memory even after the reserve, or a
        # fault of Portal's): the program's own error goes on unchanged, as without
        # Portal, rather than a new one raised from inside the rescue.
        runtime.capture_failed.add(id(exc))
        where = traceback.extract_tb(error.__traceback__)
        at = f" ({os.path.basename(where[-1].filename)}:{where[-1].lineno})" if where else ""
        _decline(runtime, exc, f"the rescue itself failed: {_message(error)}{at}")


def _rescue(runtime, loop_frame, loop_line, exc):
    """The stages, one line each; every rule that can decline runs in decide.py,
    before anything is freed or written."""
    preempted = safepoint.is_preempted(exc)
    if preempted:
        safepoint.writing()                                     # the grace stops: its safe point is reached
    point = decide.decide(runtime, loop_frame, loop_line, exc, roll_back=not preempted)
    if not isinstance(point, decide.Point):
        if not point:
            return None
        code = loop_frame.f_code
        return _decline(runtime, exc, point,
                        (loop_frame, f"the loop at {code.co_filename}:{loop_line} in {code.co_name}()"))
    if not preempted:   # the gradients the failed iteration's backward wrote, put back (grads.py)
        grads.restore(loop_frame.f_code, loop_line)
    error = _Error(exc)                                         # its text, before the frames go
    point.notes = _notes(runtime, loop_frame, exc, point)       # what was passed over, and why
    # docs/policies.md; a preemption (safepoint.py) always suspends
    action = oom_policy.SUSPEND if preempted else oom_policy.action(runtime.policy)
    job, created = _job(runtime)                                # before the free: nothing declines after it
    if job is None:
        return _decline(runtime, exc, created)                  # no job could be made: why
    if action == oom_policy.SKIP:
        skipped = skip.try_skip(runtime, job, loop_frame, exc, error, point, _free_inner_frames)
        if skipped is True:
            threading_state.thaw()                              # nothing is written: held threads go on
            return True                                         # the handler continues the loop
        point.notes.append(skipped)
    _free_inner_frames(exc, loop_frame)                         # 3. free
    point.retry = None
    if action == oom_policy.RETRY:
        point.retry, why_not = retry.decide(runtime, job, point.state.loop)
        if why_not:
            point.notes.append(why_not)
    safepoint.writing()                                         # a preemption's grace waits for the write
    info = _write(runtime, job, point, _manifest_fields(runtime, job, exc, error, point))   # 4. save
    if info is None:
        return _failed(runtime, exc, job, created, point)
    _record(runtime, job, error, point, info)
    _report_and_exit(runtime, job, error, point, info.total_bytes)   # 5. suspend


def _notes(runtime, loop_frame, exc, point):
    """Lines the report adds: the loops inside this one's iteration that the error
    passed through and that declined (why: what to change for the next time), a
    comprehension the error passed through, which cannot be the point to continue
    from (comprehensions.py), what a callee did that stays done (decide.py found it)."""
    inner = _inner_frames(exc, loop_frame)   # an entry of an earlier error of the same id is not this one's
    notes = [f"{loop} was passed over: {reason}"
             for frame, loop, reason in runtime.passed_over.get(id(exc), ()) if frame in inner]
    notes.append(comprehensions.passed_over(exc, loop_frame, runtime.is_program_file))
    return [note for note in notes if note] + point.callee


def _inner_frames(exc, loop_frame):
    """The ids of the loop's frame and of the frames the error passed through inside it."""
    if tracebacks.loop_entry(exc, loop_frame) is None:
        return set()
    return {id(loop_frame)} | {id(tb.tb_frame) for tb in tracebacks.inside(exc, loop_frame)}


class _Error:
    def __init__(self, exc):
        self.reason = exc.reason if safepoint.is_preempted(exc) else "oom"   # PREEMPTED or MEMORY
        where = traceback.extract_tb(exc.__traceback__)
        self.at = where[-1] if where else None
        self.text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        self.traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        self.where = f"{self.at.filename}:{self.at.lineno}" if self.at else None
        if safepoint.is_preempted(exc):   # no error of the program's: what happened
            cap = safepoint.memory_cap()
            self.text = ("preempted (portal-run was sent its preemption signal)" if self.reason == safepoint.PREEMPTED
                         else f"out of memory: resident memory passed the memory tripwire's cap of "
                              f"{size_text(cap or 0)} (suspended at the next iteration's start)")
            # where: the loop body's first line, not the safe point's raise
            user = [e for e in where if os.path.basename(e.filename) != "safepoint.py"]
            self.at = user[-1] if user else None
            self.where = f"{self.at.filename}:{self.at.lineno}" if self.at else None


def _job(runtime):
    """(the job, whether this rescue made it), or (None, why none could be made)."""
    created = not runtime.job_dir
    try:
        job = jobs.Job(runtime.job_dir) if runtime.job_dir else jobs.Job.create(runtime.main_filename)
    except (store.StoreError, OSError) as error:
        return None, f"no job could be made in the job store: {_message(error)}"
    runtime.job_dir = job.dir
    return job, created


def _manifest_fields(runtime, job, exc, error, point):
    loop, main_code = point.state.loop, runtime.main_code()
    return {
        "job": job.id,
        "job_id": job.id,        # signed: the checkpoint is bound to this job
        "script": runtime.main_filename,
        "argv": list(sys.argv),
        "error": {"type": type(exc).__qualname__, "message": str(exc), "text": error.text,
                  "traceback": error.traceback,
                  "file": error.at.filename if error.at else None,
                  "line": error.at.lineno if error.at else None},
        "loop": {"file": loop.filename, "line": loop.line, "iteration": loop.iteration,
                 "function": loop.function},
        "sources": runtime.registry.sources(),
        "runtime": runtime.context(),
        # Where each saved frame stands, outermost first: for `portal inspect`, which
        # never unpickles (optional field, docs/checkpoint-format.md).
        "frames": [{"function": fs.name, "file": fs.filename,
                    "line": _frame_line(fs, main_code)} for fs in point.state.frames],
        # What the failed iteration did that the resume does not undo (optional field).
        "will_differ": list(point.will_differ),
    }


def _write(runtime, job, point, manifest_fields):
    """The checkpoint (CheckpointInfo), or None after two failed tries
    (point.failures); point.cut: the tensors it saved as leaves (the report's)."""

    def write(attempt):
        context = PickleContext(marks=point.marks, spill_dir=job.dir)   # each try a pickling of its own
        point.cut = context.cut
        exact, inherited = plugins.reducers(context)
        with _TestFault(checkpoint, attempt):
            return checkpoint.write_checkpoint(job.dir, "checkpoint", point.state, point.roots,
                                               manifest_fields, registry=runtime.registry,
                                               reducers=exact, subclass_reducers=inherited)

    # A failed write leaves no partial checkpoint (checkpoint/write.py).  Free what can be
    # freed and try once more; a second failure ends the job: the error goes on as
    # without Portal, and the capture's message says why it was not rescued.
    point.failures = []
    for attempt in (1, 2):
        _free_what_can_be_freed()
        try:
            return write(attempt)
        except DeclineLoop as d:   # only when decide.py's trial ran short of memory
            point.failures = f"its state holds {d}"
            return None
        except Unsaveable as u:   # only when decide.py's trial could not tell: not retried
            point.failures = f"its state holds {u}; {UNSAVEABLE_ADVICE}"
            return None
        except Exception as error:  # noqa: BLE001 - any failure of the writer
            point.failures.append((type(error), _message(error)))
        # Out of the except block, the failed try is gone with its traceback: the
        # frames of the writer, its pickler and memo, the buffers it had listed.
    return None


def _failed(runtime, exc, job, created, point):
    """Both tries failed (the trial pickling in decide.py could not tell: it ran
    short of memory itself, or the disk is full): the job ends."""
    if created:
        shutil.rmtree(job.dir, ignore_errors=True)
        runtime.job_dir = None
    if isinstance(point.failures, str):
        return _decline(runtime, exc, point.failures)   # not this loop: the next one out may be
    runtime.capture_failed.add(id(exc))
    (type1, text1), (type2, text2) = point.failures
    reason = text2 if (type1, text1) == (type2, text2) else f"{text1}, then {text2}"
    return _decline(runtime, exc, f"its checkpoint could not be written (tried twice): {reason}")


def _record(runtime, job, error, point, info):
    """The record says suspended.  The checkpoint is committed already and is the
    truth (`portal` shows a job whose sound checkpoint disagrees with its record
    as suspended): a record that cannot be updated is said, not fatal."""
    now = time.time()
    point.expires = now + jobs.EXPIRY_SECONDS
    try:
        _update_suspended(runtime, job, error, point, info, now)
    except (store.PortalError, OSError) as failure:
        _say("job", f"{job.id}: its record could not be updated ({_message(failure)}); "
                    f"the checkpoint is committed: portal resume {job.id}")


def _update_suspended(runtime, job, error, point, info, now):
    loop = point.state.loop
    job.update_record(state="suspended", script=runtime.main_filename, argv=list(sys.argv), cwd=os.getcwd(),
                      suspended_at=jobs.utc_iso(now), expires_at=jobs.utc_iso(point.expires),
                      checkpoint_bytes=info.total_bytes, error=error.text, error_at=error.where,
                      checkpoint_write={"bytes": info.total_bytes, "seconds": round(info.seconds, 3)},
                      loop=f"{loop.filename}:{loop.line}", iteration=loop.iteration,
                      will_differ=list(point.will_differ),
                      suggested_mem_gib=hint.mem_gib(error.text),    # what the report and `portal show` suggest
                      suggested_gpu=hint.is_gpu_shortage(error.text),  # hint.py: a GPU's memory ran short
                      retry_requested=point.retry,              # retry.py: the supervisor resumes at once
                      reason=error.reason)                      # "oom", "preempted" or "memory" (safepoint.py)


def _names_of(objects, roots):
    """Where the objects are in the state: a root itself, or an item of a tuple,
    list or dict root; "a tensor inside X" failing that."""
    wanted = {id(o) for o in objects}
    names = []
    for root, value in roots.items():
        if id(value) in wanted:
            names.append(root)
            wanted.discard(id(value))
        elif isinstance(value, (tuple, list)):
            for i, item in enumerate(value):
                if id(item) in wanted:
                    names.append(f"{root}[{i}]")
                    wanted.discard(id(item))
        elif isinstance(value, dict):
            for key, item in value.items():
                if id(item) in wanted:
                    names.append(f"{root}[{key!r}]")
                    wanted.discard(id(item))
    if not wanted:
        return names
    if names:
        return names + [f"{len(wanted)} more, inside other objects"]
    return ["1 tensor inside an object of the state" if len(wanted) == 1
            else f"{len(wanted)} tensors inside objects of the state"]


def _what_ran_short(error, seen):
    """The suspension's "what ran short: ..." line (shortage.py, of what the rescue
    noted: ``seen``), or None: not for a preemption, nor for a safe point's memory
    request (its first line says it)."""
    if error.reason != "oom":
        return None
    try:
        return shortage.line(seen, safepoint.memory_cap(), size_text)
    except Exception:  # noqa: BLE001 - a line of the report, never a reason to fail the suspension
        return None


def _report_and_exit(runtime, job, error, point, size):
    cut = _names_of(point.cut, point.roots)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    loop = point.state.loop
    at = f" at {error.where}" if error.where else ""
    iteration = f", {loop.iteration_text}" if loop.iteration_text else ""
    retry = getattr(point, "retry", None)
    # oom.action=retry (retry.py): the job is not left suspended, the supervisor
    # resumes it at once; every line says so, none says "suspended"
    subject = "retrying" if retry else "suspended"
    _say(subject, f"{error.text}{at}")
    short = _what_ran_short(error, runtime.rescuer.shortage)
    if short:
        _say(subject, short)
    preempted = error.reason == "preempted"
    at_safe_point = error.reason in ("preempted", "memory")   # safepoint.py: taken where an iteration starts
    _say(subject, f"will continue from the loop at {loop.filename}:{loop.line} in {loop.function}()"
                  f"{iteration}; " + ("that iteration had not started yet" if at_safe_point
                                      else "that iteration runs again from its start"))
    for item in point.will_differ:
        _say(subject, f"will differ: {item}")
    for note in point.notes:
        _say(subject, note)
    if cut:
        _say(subject, "saved as plain tensors, their autograd graph already used by backward(): " +
                      ", ".join(cut))
    if retry:
        _say("retrying", f"job {job.id}, checkpoint {size_text(size)}: resumed at once in a fresh process "
                         f"(retry {retry['attempt']} of {retry['of']}, oom.action=retry)")
    else:
        _say("suspended", f"job {job.id}, checkpoint {size_text(size)} in {job.dir}, "
                          f"kept until {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(point.expires))} (3 days)")
        if preempted:
            _say("suspended", f"resume it: portal resume {job.id}")
        else:
            _say("suspended", hint.resume_line(job.id, error.text))
    sys.stderr.flush()
    workers.shut_down()  # a DataLoader's workers hold the output pipes: not left to their watchdog
    os._exit(SUSPENDED_EXIT)
