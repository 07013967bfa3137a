"""From an out-of-memory error in a loop to a suspended job (rescue/entry.py's stages 1-5).

_rescue() is the driver: decide (decide.py: every rule, nothing freed yet), free
the frames inside the loop, write the checkpoint, record the job, report and exit.
"""
import os
import random
import sys
import time
import traceback

from _portal.rescue import hint, policy as oom_policy
from _portal.store import jobs, trust as store
from _portal.job_contract import SUSPENDED_EXIT_STATUS  # contract/job_record.json, generated
from _portal.checkpoint.program import LoopInfo, ProcessState, ProgramState
from _portal.checkpoint.progress import size_text
from _portal import job_contract  # the environment variables' names (contract/job_record.json)

SUSPENDED_EXIT = SUSPENDED_EXIT_STATUS  # EX_TEMPFAIL: try again later (on a larger machine)


def _say(subject, problem):
    from _portal.run import lines
    lines.start()   # on a line of its own, after a progress bar's unfinished line too
    sys.stderr.write(f"portal: {subject}: {problem}\n")


def _decline(runtime, exc, reason, loop=None):
    """loop: (its frame, "the loop at FILE:LINE in F()") where this loop's own
    rules declined it (decide.py): should a loop further out be the point, its
    report says why this one was passed over."""
    runtime.declined.setdefault(id(exc), []).append(reason)
    if loop is not None:
        runtime.passed_over.setdefault(id(exc), []).append((id(loop[0]), loop[1], reason))
    from _portal.state import threading_state
    threading_state.thaw()   # the threads decide.py held at their wait go on (fidelity.md)


# ---- 3. free ------------------------------------------------------------------------------

def _free_inner_frames(exc, loop_frame):
    """Clear the frames the error passed through inside the loop (the activations,
    gradients and temporaries they hold), keeping the traceback's text."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame is not loop_frame:
        tb = tb.tb_next
    tb = tb.tb_next if tb is not None else None
    while tb is not None:
        try:
            tb.tb_frame.clear()
        except RuntimeError:
            pass  # still executing (cannot happen for frames the error left)
        tb = tb.tb_next
    if "torch" in sys.modules:   # what those frames held on a GPU goes back to the driver
        from _portal.torch import objects as torch_state
        torch_state.release_cached_device_memory()


def _free_what_can_be_freed():
    """Before each try at the checkpoint: collect the cycles that the cleared frames
    (or a failed try) left, and drop the source lines the traceback's text read."""
    import gc
    import linecache
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


# ---- 4. save -------------------------------------------------------------------------------

def _process_state(runtime):
    numpy_state = None
    np = sys.modules.get("numpy")
    if np is not None:
        numpy_state = np.random.get_state()
    from _portal.state import plugins
    return ProcessState(argv=list(sys.argv), orig_argv=list(sys.orig_argv), cwd=os.getcwd(),
                        environ=dict(os.environ),
                        path=list(runtime.program_path if runtime.program_path is not None
                                  else sys.path),
                        random_state=random.getstate(), numpy_state=numpy_state,
                        plugins=plugins.capture_process(),
                        recursion_limit=sys.getrecursionlimit())


# Iterators whose __reduce__ gives (iter, (sequence,), items taken so far).
_INDEXED_ITERATORS = frozenset({
    "list_iterator", "tuple_iterator", "range_iterator", "longrange_iterator",
    "str_ascii_iterator", "str_iterator", "bytes_iterator", "bytearray_iterator"})


def _index(it):
    """The 0-based index of the item `it` gave last, as the program counts it: a
    list, tuple, range, str ... iterator, enumerate over one, or a DataLoader's
    iterator (batch); None when its state is not a count of the items it gave
    (islice, zip, reversed, a dict's ...).  (kind, index) with kind 'iteration'
    or 'batch'."""
    try:
        for _ in range(8):  # enumerate(enumerate(...)) ...
            name = type(it).__name__
            if name == "enumerate":
                it = it.__reduce__()[1][0]
                continue
            if name == "generator":   # tqdm(iterable): the iterable's iterator (iteration_count.py)
                from _portal.fidelity import iteration_count
                it = iteration_count.wrapped_iterator(it)
                continue
            if name in _INDEXED_ITERATORS:
                reduced = it.__reduce__()
                if len(reduced) >= 3 and isinstance(reduced[2], int) and reduced[2] > 0:
                    return "iteration", reduced[2] - 1
            elif isinstance(getattr(it, "_num_yielded", None), int) and it._num_yielded > 0 \
                    and hasattr(it, "_index_sampler"):
                return "batch", it._num_yielded - 1
            return None
    except Exception:
        return None
    return None


_RANGE_ITERATORS = frozenset({"range_iterator", "longrange_iterator"})


def _range_index(it, frame, for_iter):
    """The 0-based index of the item a range iterator gave last, where it keeps
    only what is left (CPython 3.12+: `range(next, stop, step)`) and the code of
    the loop whose FOR_ITER is at `for_iter` in `frame` (a live frame) says where
    the range began (bytecode/range_loops.py), the name `range` being the builtin
    there; None otherwise."""
    if type(it).__name__ not in _RANGE_ITERATORS or for_iter is None:
        return None
    from _portal.bytecode.range_loops import RANGE, range_start
    found = range_start(frame.f_code, for_iter)
    if found is None:
        return None
    scope, start = found
    bound = frame.f_globals.get(RANGE, frame.f_builtins.get(RANGE))   # LOAD_GLOBAL's lookup
    if scope == "name":                 # LOAD_NAME: a class body's namespace first
        bound = frame.f_locals.get(RANGE, bound)
    if bound is not range:
        return None
    try:
        left = it.__reduce__()[1][0]
    except Exception:
        return None
    if not isinstance(left, range) or left.step == 0:
        return None
    given, rest = divmod(left.start - start, left.step)
    return given - 1 if rest == 0 and given > 0 else None


def _counted(it, frame, for_iter):
    """_index(it), or for a range iterator that does not tell, _range_index."""
    found = _index(it)
    if found is None and frame is not None:
        try:
            index = _range_index(it, frame, for_iter)
            if index is None:   # enumerate(generator): the enumerate's own count
                from _portal.fidelity import iteration_count
                index = iteration_count.enumerate_index(it, frame, for_iter)
        except Exception:   # code the bytecode layer cannot read: no count, never a wrong one
            index = None
        found = None if index is None else ("iteration", index)
    return found


def _outer_iterators(frames, site, loop_frame):
    """(iterator, live frame, FOR_ITER offset or None) for each stack item of the
    loops around the loop's, innermost first: the loop frame's slots below its
    iterator, then each caller's."""
    from _portal.bytecode.range_loops import enclosing_for_iter
    live = []                           # the live frame of each caller, where found
    f = loop_frame.f_back
    main = sys.modules["__main__"].__dict__
    for fs in frames[-2::-1]:
        code = fs.function.__code__ if fs.function is not None else None
        while f is not None and not (f.f_code is code if code is not None else
                                     (f.f_globals is main and f.f_code.co_name == "<module>")):
            f = f.f_back
        live.append(f)
        if f is not None:
            f = f.f_back
    chain = [(frames[-1].stack[:site.iter_slot], loop_frame, site.for_iter)]
    chain += [(fs.stack, frame, fs.offset) for fs, frame in zip(frames[-2::-1], live)]
    for items, frame, offset in chain:
        for slot in range(len(items) - 1, -1, -1):
            for_iter = None
            if frame is not None and offset is not None:
                try:
                    for_iter = enclosing_for_iter(frame.f_code, offset, slot)
                except Exception:   # as in _counted: no count
                    for_iter = None
            yield items[slot], frame, for_iter


def _iteration(frames, site, loop_frame):
    """(index, text) of the iteration that runs again: `iteration 13 (0-based)`,
    `batch 4 (0-based) of epoch 2 (0-based)` for a DataLoader loop inside an
    indexed one; (None, None) when the loop's iterator does not tell (a while
    loop, whose stack holds only what outer loops iterate)."""
    stack = frames[-1].stack
    if not site.is_for or site.iter_slot is None or site.iter_slot >= len(stack):
        return None, None
    found = _counted(stack[site.iter_slot], loop_frame, site.for_iter)
    if found is None:
        return None, None
    kind, index = found
    text = f"{kind} {index} (0-based)"
    if kind == "batch":   # the epoch: the nearest enclosing loop that counts
        for item, frame, for_iter in _outer_iterators(frames, site, loop_frame):
            got = _counted(item, frame, for_iter)
            if got is not None and got[0] == "iteration":
                text += f" of epoch {got[1]} (0-based)"
                break
    return index, text


def _error_roots(state):
    roots = {}
    for name, value in state.main.items():
        roots[f"global {name!r}"] = value
    from _portal.bytecode import codemap
    for fs in state.frames:
        names = codemap.slot_names(fs.function.__code__) if fs.function is not None else []
        for i, value in enumerate(fs.locals):
            name = repr(names[i]) if i < len(names) else str(i)
            roots[f"local {name} of {fs.name}() at {fs.filename}:{fs.line}"] = value
        for i, value in enumerate(fs.stack):
            # a for loop's iterator, a with statement's __exit__, an operand ...
            roots[f"stack item {i} of {fs.name}() at {fs.filename}:{fs.line}"] = value
    return roots


def _frame_line(fs, main_code):
    """The source line of the instruction a saved frame continues at."""
    from _portal.bytecode import codemap   # as _error_roots does: the rescue pays for the bytecode layer, not start-up
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
    from _portal.rescue import decide
    from _portal.rescue import safepoint
    preempted = safepoint.is_preempted(exc)
    if preempted:
        safepoint.writing()                                     # the grace stops: its safe point is reached
    point = decide.decide(runtime, loop_frame, loop_line, exc,
                          lambda frames, site: _point_state(runtime, loop_frame, loop_line, frames, site,
                                                            roll_back=not preempted))
    if not isinstance(point, decide.Point):
        if not point:
            return None
        code = loop_frame.f_code
        return _decline(runtime, exc, point,
                        (loop_frame, f"the loop at {code.co_filename}:{loop_line} in {code.co_name}()"))
    if not preempted:   # the gradients the failed iteration's backward wrote, put back (grads.py)
        from _portal.fidelity import grads
        grads.restore(loop_frame.f_code, loop_line)
    error = _Error(exc)                                         # its text, before the frames go
    point.notes = _notes(runtime, loop_frame, exc, point)       # what was passed over, and why
    # docs/policies.md; a preemption (safepoint.py) always suspends
    action = oom_policy.SUSPEND if preempted else oom_policy.action(runtime.policy)
    job = None
    if action == oom_policy.SKIP:
        job, created = _job(runtime)
        if job is None:
            return _decline(runtime, exc, created)
        from _portal.rescue import skip
        skipped = skip.try_skip(runtime, job, loop_frame, exc, error, point, _free_inner_frames)
        if skipped is True:
            from _portal.state import threading_state
            threading_state.thaw()                              # nothing is written: held threads go on
            return True                                         # the handler continues the loop
        point.notes.append(skipped)
    _free_inner_frames(exc, loop_frame)                         # 3. free
    if job is None:
        job, created = _job(runtime)
        if job is None:
            return _decline(runtime, exc, created)              # no job could be made: why
    point.retry = None
    if action == oom_policy.RETRY:
        from _portal.rescue import retry
        point.retry, why_not = retry.decide(runtime, job, point.state.loop)
        if why_not:
            point.notes.append(why_not)
    safepoint.writing()                                         # a preemption's grace waits for the write
    info = _write(runtime, job, point, _manifest_fields(runtime, job, exc, error, point))   # 4. save
    if info is None:
        return _failed(runtime, exc, job, created, point)
    _record(runtime, job, error, point, info)
    _report_and_exit(job, error, point, info.total_bytes)       # 5. suspend


def _point_state(runtime, loop_frame, loop_line, frames, site, roll_back=True):
    """(ProgramState to save at this loop, the names of its roots, the marks of the
    iteration's start it is rolled back to or None).  roll_back=False: the point is
    the start of an iteration that has not run yet (a preemption's safe point): the
    states are saved as they are."""
    index, text = _iteration(frames, site, loop_frame)
    loop = LoopInfo(filename=loop_frame.f_code.co_filename, line=loop_line,
                    iteration=index, function=loop_frame.f_code.co_name, iteration_text=text)
    process = _process_state(runtime)
    from _portal.fidelity import iteration
    marks = iteration.at_start(loop_frame.f_code, loop_line)
    if not roll_back:
        marks = None
    if marks is not None:   # the iteration runs again: with the random numbers it drew
        iteration.roll_back(process, marks)
    state = ProgramState(frames=frames, main=sys.modules["__main__"].__dict__,
                         process=process, loop=loop,
                         fake_oom=runtime.fake_oom.counts if runtime.fake_oom else None)
    return state, _error_roots(state), marks


def _notes(runtime, loop_frame, exc, point):
    """Lines the report adds: the loops inside this one's iteration that the error
    passed through and that declined (why: what to change for the next time), a
    comprehension the error passed through, which cannot be the point to continue
    from (comprehensions.py), what a callee did that stays done (decide.py found it)."""
    from _portal.fidelity import comprehensions
    inner = _inner_frames(exc, loop_frame)   # an entry of an earlier error of the same id is not this one's
    notes = [f"{loop} was passed over: {reason}"
             for frame, loop, reason in runtime.passed_over.get(id(exc), ()) if frame in inner]
    notes.append(comprehensions.passed_over(exc, loop_frame, runtime.is_program_file))
    return [note for note in notes if note] + point.callee


def _inner_frames(exc, loop_frame):
    """The ids of the frames the error passed through inside the loop's frame."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame is not loop_frame:
        tb = tb.tb_next
    out = set()
    while tb is not None:
        out.add(id(tb.tb_frame))
        tb = tb.tb_next
    return out


class _Error:
    def __init__(self, exc):
        from _portal.rescue import safepoint
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
    from _portal.checkpoint import write as checkpoint
    from _portal.state import plugins
    from _portal.checkpoint.reducers import DeclineLoop, Unsaveable
    from _portal.checkpoint.context import PickleContext

    def write(attempt):
        context = PickleContext(marks=point.marks)        # each try a pickling of its own
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
            from _portal.rescue.decide import UNSAVEABLE_ADVICE
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
        import shutil
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


def _what_ran_short(error):
    """The suspension's "what ran short: ..." line (shortage.py), or None: not for
    a preemption, nor for a safe point's memory request (its first line says it)."""
    if error.reason != "oom":
        return None
    try:
        from _portal.rescue import safepoint, shortage
        return shortage.line(safepoint.memory_cap(), size_text)
    except Exception:  # noqa: BLE001 - a line of the report, never a reason to fail the suspension
        return None


def _report_and_exit(job, error, point, size):
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
    short = _what_ran_short(error)
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
    from _portal.state import workers
    workers.shut_down()  # a DataLoader's workers hold the output pipes: not left to their watchdog
    os._exit(SUSPENDED_EXIT)
