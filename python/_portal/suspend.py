"""From an out-of-memory error in a loop to a suspended job (rescue.py's stages 1-5)."""
import os
import random
import sys
import time
import traceback

from _portal import capture, jobs
from _portal.state import LoopInfo, ProcessState, ProgramState

SUSPENDED_EXIT = 75  # EX_TEMPFAIL: try again later (on a larger machine)
# What to do about an object the checkpoint cannot hold (the last words of a decline).
UNSAVEABLE_ADVICE = ("Portal cannot save it: close or drop it before the loop, keep it out of "
                     "the loop's state, or give its class __getstate__/__setstate__ that "
                     "leave it out and make it again")


def _say(subject, problem):
    sys.stderr.write(f"portal: {subject}: {problem}\n")


# ---- 1. decide --------------------------------------------------------------------------

def _inside_optimizer_step(exc):
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename.replace("\\", "/")
        if "/torch/optim/" in filename:
            return f"{filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    return None


def _taken_by_user_handler(loop_frame, exc):
    from _portal import handlers
    return handlers.user_handler_taking(loop_frame, exc)


def _decline(runtime, exc, reason):
    runtime.declined.setdefault(id(exc), []).append(reason)


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
        spec = os.environ.get("PORTAL_TEST_FAULT", "")
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

def _process_state():
    numpy_state = None
    np = sys.modules.get("numpy")
    if np is not None:
        numpy_state = np.random.get_state()
    from _portal import plugins
    return ProcessState(argv=list(sys.argv), orig_argv=list(sys.orig_argv), cwd=os.getcwd(),
                        environ=dict(os.environ), path=list(sys.path),
                        random_state=random.getstate(), numpy_state=numpy_state,
                        plugins=plugins.capture_process())


# Iterators whose __reduce__ gives (iter, (sequence,), items taken so far).
_INDEXED_ITERATORS = frozenset({
    "list_iterator", "tuple_iterator", "range_iterator", "longrange_iterator",
    "str_ascii_iterator", "str_iterator", "bytes_iterator", "bytearray_iterator"})


def _iteration(stack, site):
    """The 1-based number of the iteration that runs again, when the for loop's
    iterator tells it (a list, tuple, range, str ..., or enumerate over one); None
    otherwise (a while loop, whose stack holds only what outer loops iterate; an
    iterator whose state is not a count of the items it gave: islice, zip,
    reversed, a dict's ...)."""
    if not site.is_for or site.iter_slot is None or site.iter_slot >= len(stack):
        return None
    it = stack[site.iter_slot]
    try:
        for _ in range(8):  # enumerate(enumerate(...)) ...
            name = type(it).__name__
            if name == "enumerate":
                it = it.__reduce__()[1][0]
                continue
            if name in _INDEXED_ITERATORS:
                reduced = it.__reduce__()
                if len(reduced) >= 3 and isinstance(reduced[2], int):
                    return reduced[2]
            return None
    except Exception:
        return None
    return None


def _error_roots(state):
    roots = {}
    for name, value in state.main.items():
        roots[f"global {name!r}"] = value
    from _portal import codemap
    for fs in state.frames:
        names = codemap.slot_names(fs.function.__code__) if fs.function is not None else []
        for i, value in enumerate(fs.locals):
            name = repr(names[i]) if i < len(names) else str(i)
            roots[f"local {name} of {fs.name}() at {fs.filename}:{fs.line}"] = value
        for i, value in enumerate(fs.stack):
            # a for loop's iterator, a with statement's __exit__, an operand ...
            roots[f"stack item {i} of {fs.name}() at {fs.filename}:{fs.line}"] = value
    return roots


def _line_at(code, offset, default):
    """The source line of the instruction a saved frame continues at."""
    for start, end, line in code.co_lines():
        if start <= offset < end and line is not None:
            return line
    return default


def _human_size(n):
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024


def _suggested_mem_gib():
    """Twice the memory the job had: its memory tripwire (portal-run --mem, or the
    machine's cap), else the machine's physical memory."""
    limit = None
    try:
        import resource
        soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
        if soft != resource.RLIM_INFINITY:
            limit = soft
    except (ImportError, OSError, ValueError):
        pass
    if limit is None:
        try:
            limit = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError):
            return 64
    return max(2, -(-2 * limit // (1 << 30)))


def _message(error):
    text = str(error)
    return text if text and not isinstance(error, MemoryError) else f"{type(error).__name__}: {text}".rstrip(": ")


def rescue(runtime, loop_frame, loop_line, exc):
    """Suspend the job at this loop (exits), or decline (returns): the error goes on."""
    try:
        return _rescue(runtime, loop_frame, loop_line, exc)
    except Exception as error:  # noqa: BLE001
        # The rescue itself failed (short of memory even after the reserve, or a
        # fault of Portal's): the program's own error goes on unchanged, as without
        # Portal, rather than a new one raised from inside the rescue.
        runtime.capture_failed.add(id(exc))
        where = traceback.extract_tb(error.__traceback__)
        at = f" ({os.path.basename(where[-1].filename)}:{where[-1].lineno})" if where else ""
        _decline(runtime, exc, f"the rescue itself failed: {_message(error)}{at}")


def _rescue(runtime, loop_frame, loop_line, exc):
    if id(exc) in runtime.capture_failed:
        return  # its checkpoint failed twice: the job ends (outer loops do not retry)
    if threading_main() is False:
        return _decline(runtime, exc, "raised in a thread other than the main thread")
    if not capture.raised_in_body(loop_frame, loop_line, exc):
        return _decline(runtime, exc, f"raised outside the body of the while loop at "
                                      f"{loop_frame.f_code.co_filename}:{loop_line} "
                                      f"(in its condition or else clause)")
    step = _inside_optimizer_step(exc)
    if step:
        return _decline(runtime, exc, f"raised inside an optimizer step ({step}): the weights may be half updated")
    handler = _taken_by_user_handler(loop_frame, exc)
    if handler:
        return  # the program's own handler takes it: Portal does not intervene
    main = sys.modules["__main__"]
    main_globals = main.__dict__
    main_code = runtime.main_code()
    try:
        frames, site = capture.capture_chain(loop_frame, loop_line, main_code, main_globals)
    except capture.Decline as d:
        return _decline(runtime, exc, str(d))

    where_tb = traceback.extract_tb(exc.__traceback__)
    error_at = where_tb[-1] if where_tb else None
    error_text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    tb_text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    from _portal import comprehensions
    notes = [n for n in [comprehensions.passed_over(
        exc, loop_frame, lambda f: f == runtime.main_filename or runtime.user_code.is_user_file(f))] if n]
    _free_inner_frames(exc, loop_frame)
    if "torch" in sys.modules:   # what those frames held on a GPU goes back to the driver
        from _portal import torch_state
        torch_state.release_cached_device_memory()

    loop = LoopInfo(filename=loop_frame.f_code.co_filename, line=loop_line,
                    iteration=_iteration(frames[-1].stack, site), function=loop_frame.f_code.co_name)
    process = _process_state()
    from _portal import iteration
    marks = iteration.at_start(loop_frame.f_code, loop_line)
    if marks is not None:   # the iteration runs again: with the random numbers it drew
        iteration.roll_back(process, marks)
    state = ProgramState(frames=frames, main=main_globals,
                         process=process, loop=loop,
                         fake_oom=runtime.fake_oom.counts if runtime.fake_oom else None)
    del frames
    created = not runtime.job_dir
    job = jobs.Job(runtime.job_dir) if runtime.job_dir else jobs.Job.create(runtime.main_filename)
    runtime.job_dir = job.dir
    manifest_fields = {
        "job": job.id,
        "script": runtime.main_filename,
        "argv": list(sys.argv),
        "error": {"type": type(exc).__qualname__, "message": str(exc), "text": error_text,
                  "traceback": tb_text,
                  "file": error_at.filename if error_at else None,
                  "line": error_at.lineno if error_at else None},
        "loop": {"file": loop.filename, "line": loop.line, "iteration": loop.iteration,
                 "function": loop.function},
        "sources": runtime.registry.sources(),
        "runtime": runtime.context(),
        # Where each saved frame stands, outermost first: for `portal inspect`, which
        # never unpickles (optional field, docs/checkpoint-format.md).
        "frames": [{"function": fs.name, "file": fs.filename,
                    "line": _line_at(main_code if fs.function is None else fs.function.__code__,
                                     fs.offset, fs.line)} for fs in state.frames],
    }
    from _portal import autograd, checkpoint, plugins
    from _portal.reducers import DeclineLoop, Unsaveable
    exact, inherited = plugins.reducers()

    def write(attempt):
        with _TestFault(checkpoint, attempt):
            return checkpoint.write_checkpoint(job.dir, "checkpoint", state, _error_roots(state),
                                               manifest_fields, registry=runtime.registry,
                                               reducers=exact, subclass_reducers=inherited)

    # A failed write leaves no partial checkpoint (checkpoint.py).  Free what can be
    # freed and try once more; a second failure ends the job: the error goes on as
    # without Portal, and the capture's message says why it was not rescued.
    failures = []
    info = None
    for attempt in (1, 2):
        _free_what_can_be_freed()
        del autograd.CUT[:]
        try:
            info = write(attempt)
            break
        except DeclineLoop as d:
            # Not this loop: the error goes on to the next loop out, which may be saved.
            return _decline(runtime, exc, f"its state holds {d}")
        except Unsaveable as u:
            # The same object fails every try: not retried; the next loop out,
            # whose state may not hold it, is tried (idioms: UNSAVEABLE_ADVICE).
            return _decline(runtime, exc, f"its state holds {u}; {UNSAVEABLE_ADVICE}")
        except Exception as error:  # noqa: BLE001 - any failure of the writer
            failures.append((type(error), _message(error)))
        # Out of the except block, the failed try is gone with its traceback: the
        # frames of the writer, its pickler and memo, the buffers it had listed.
    if info is None:
        if created:
            import shutil
            shutil.rmtree(job.dir, ignore_errors=True)
            runtime.job_dir = None
        runtime.capture_failed.add(id(exc))
        (type1, text1), (type2, text2) = failures
        reason = text2 if (type1, text1) == (type2, text2) else f"{text1}, then {text2}"
        return _decline(runtime, exc, f"its checkpoint could not be written (tried twice): {reason}")

    now = time.time()
    expires = now + jobs.EXPIRY_SECONDS
    job.update_record(state="suspended", script=runtime.main_filename, argv=list(sys.argv), cwd=os.getcwd(),
                      suspended_at=jobs.utc_iso(now), expires_at=jobs.utc_iso(expires),
                      checkpoint_bytes=info.total_bytes, error=error_text,
                      error_at=f"{error_at.filename}:{error_at.lineno}" if error_at else None,
                      loop=f"{loop.filename}:{loop.line}", iteration=loop.iteration,
                      suggested_mem_gib=_suggested_mem_gib())   # what the report and `portal show` suggest
    cut = _names_of(autograd.CUT, _error_roots(state))
    del autograd.CUT[:]
    _report_and_exit(job, error_text, error_at, loop, info.total_bytes, expires, cut, notes)


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
    return names + [f"{len(wanted)} more, inside other objects"] * bool(wanted)


def _report_and_exit(job, error_text, error_at, loop, size, expires, cut=(), notes=()):
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    at = f" at {error_at.filename}:{error_at.lineno}" if error_at else ""
    iteration = f", iteration {loop.iteration}" if loop.iteration is not None else ""
    _say("suspended", f"{error_text}{at}")
    _say("suspended", f"will continue from the loop at {loop.filename}:{loop.line} in {loop.function}()"
                      f"{iteration}; that iteration runs again from its start")
    for note in notes:
        _say("suspended", note)
    if cut:
        _say("suspended", "saved as plain tensors, their autograd graph already used by backward(): " +
                          ", ".join(cut))
    _say("suspended", f"job {job.id}, checkpoint {_human_size(size)} in {job.dir}, "
                      f"kept until {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(expires))} (3 days)")
    _say("suspended", f"resume it on a machine with more memory: portal resume {job.id} --mem {_suggested_mem_gib()}")
    sys.stderr.flush()
    from _portal import workers
    workers.shut_down()  # a DataLoader's workers hold the output pipes: not left to their watchdog
    os._exit(SUSPENDED_EXIT)


def threading_main():
    threading = sys.modules.get("threading")
    if threading is None:
        return True
    return threading.current_thread() is threading.main_thread()
