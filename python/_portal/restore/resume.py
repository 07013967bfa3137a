"""Restore: a suspended job continues in a new process (docs/architecture.md, "How a suspension and a resume work").

The stages, in order:
  1. read the checkpoint: owners and modes, the manifest's HMAC (made with the
     user's key), versions, checksums and sources verified before any unpickling
     or any use of the manifest (checkpoint/read.py, docs/security.md); a refusal is a
     ResumeError and changes nothing of the job
  2. put the process back: working directory, environment, sys.argv (sys.path
     last, by boot.py, just before the program goes on: until then Portal
     imports only from the interpreter's own path, never from the working
     directory or the program's directory)
  3. unpickle the program: the user's modules and __main__'s globals rebuilt on
     freshly compiled code of the same sources; the RNG states set
  4. re-enter the chain of frames: __main__'s code runs from its saved
     instruction with its saved stack; each caller's call instruction finds a
     Reenter in place of its callable, which calls the next frame's function;
     each frame gets its saved locals and stack as it starts (_frames.resume);
     the frame-evaluation hook is gone once the loop's frame has started
  5. the program goes on; its exit status is the job's
"""
import os
import random
import sys
import time

# Imported by `portal resume` only (boot.py): its imports at the top cost no
# program's start-up anything.
from _portal import _frames, _toplevel
from _portal import job_contract  # the environment variables' names (contract/job_record.json)
from _portal.bytecode import codemap
from _portal.bytecode.tables import T as _BYTECODE
from _portal.checkpoint import format as checkpoint, read
from _portal.checkpoint.program import EMPTY
from _portal.fidelity import rng_check
from _portal.job_contract import EXPIRY_SECONDS, SUSPENDED_EXIT_STATUS
from _portal.rescue import safepoint
from _portal.run.codeindex import CodeChanged
from _portal.state import plugins
from _portal.state.generators import placeholders as _placeholders
from _portal.store import jobs, trust as store
from _portal.store.trust import shown
from _portal.torch import objects as torch_state


def _apply_process_state(process):
    os.chdir(process.cwd)
    # The device map is the resuming process's (portal resume --device-map), not the
    # job's: pinned before the job's environment replaces it, so that the CUDA
    # generators the plug-ins restore below go where the tensors went.
    torch_state.pin_device_map(os.environ)
    os.environ.clear()
    os.environ.update(process.environ)
    sys.argv[:] = process.argv
    sys.orig_argv[:] = process.orig_argv
    # Set when the program's top level starts again (toplevel.c): here, under
    # Portal's frames, a limit lower than their depth would be refused.
    _toplevel.set_program_recursion_limit(getattr(process, "recursion_limit", None) or 0)
    if process.random_state is not None:
        random.setstate(process.random_state)
    if process.numpy_state is not None:
        import numpy
        numpy.random.set_state(process.numpy_state)
    plugins.restore_process(getattr(process, "plugins", None))
    rng_check.note()      # the states the resumed program starts from


def build_chain(frames, main_code):
    """[(code, locals, stack, offset)] for _frames.resume, __main__'s frame first."""
    chain = []
    for i, fs in enumerate(frames):
        code = main_code if fs.function is None else fs.function.__code__
        stack = list(fs.stack)
        call = fs.call
        if call is not None and call.kind != "for_iter":
            callee = frames[i + 1].function
            args, kwargs = _placeholders(callee.__code__)
            extra = {} if call.result is EMPTY else {"result": call.result}
            reenter = _frames.Reenter(callee, args, kwargs, **extra)
            # the call's two callable slots, in the version's order (3.11: [NULL,
            # Reenter]; 3.13: [Reenter, NULL]), then placeholder operands
            stack += _BYTECODE.reenter_operands(reenter, EMPTY)
            if call.kind == "call":
                stack += [None] * call.nargs
                if _BYTECODE.CALL_PROTOCOL == "call_kw" and call.has_kwargs:
                    # 3.13's CALL_KW takes the keyword names' tuple from the stack
                    stack.append(codemap.call_site(code, fs.offset).kw_names)
            else:  # call_ex: f(*args, **kwargs) with the callable's operands re-made
                stack += [()] + ([{}] if call.has_kwargs else [])
        chain.append((code, fs.locals, stack, fs.offset))
    return chain


def _preempted_while_restoring(job):
    """A preemption request (SIGTERM to `portal resume`) that came while the
    interpreter started or the job was restored: the program stands at the start of
    the checkpoint's iteration, which has not started, so the request is taken there
    - the job stays suspended at the checkpoint it was resumed from, reason
    preempted, exit 75 - as at the first iteration start (docs/preemption.md)."""
    now = time.time()
    record = {}
    try:
        record = job.read_record()
        record = job.update_record(state="suspended", suspended_at=jobs.utc_iso(now),
                                   expires_at=jobs.utc_iso(now + EXPIRY_SECONDS), reason="preempted",
                                   error="preempted (portal resume was sent its preemption signal)",
                                   error_at=record.get("loop"), retry_requested=None)
    except (store.PortalError, OSError) as e:
        # The record still says suspended (the restore had not marked it running).
        sys.stderr.write(f"portal: job: {job.id}: its record could not be updated ({store.shown(e)}); "
                         f"it stays suspended: portal resume {job.id}\n")
    iteration = record.get("iteration")
    where = f" from the loop at {store.shown(record['loop'])}" if isinstance(record.get("loop"), str) else ""
    which = f", iteration {iteration} (0-based)" if isinstance(iteration, int) else ""
    sys.stderr.write("portal: suspended: preempted (portal resume was sent its preemption signal) while the "
                     "job was restored\n"
                     f"portal: suspended: will continue{where}{which}; that iteration had not started yet\n"
                     f"portal: suspended: job {job.id} keeps its checkpoint, kept until "
                     f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(now + EXPIRY_SECONDS))} (3 days)\n"
                     f"portal: suspended: resume it: portal resume {job.id}\n")
    sys.stderr.flush()
    os._exit(SUSPENDED_EXIT_STATUS)


class ResumeError(Exception):
    """The job cannot be resumed; it stays suspended, intact."""


def start(job_dir, make_runtime, policy=None):
    """Stages 1-4: returns (runtime, main code, __main__'s globals) with the chain
    ready to be entered by running main code.  make_runtime(main_filename, job_dir=,
    extra_user_code=) builds and installs the runtime.  Any failure before the
    program continues is a ResumeError (a `portal: resume:` line, never a
    traceback); the job stays suspended."""
    try:
        return _start(job_dir, make_runtime, policy)
    except (ResumeError, SystemExit, KeyboardInterrupt, MemoryError):
        raise
    except Exception as e:  # noqa: BLE001 - Portal's own fault: said in one line
        where = ""
        tb = e.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        if tb is not None:
            where = f" at {os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"
        raise ResumeError(f"it failed before the program continued ({type(e).__name__}: "
                          f"{shown(e)}{where})") from None


def _policy_of(saved, given):
    """The resumed run's policies: the job's own, each key given again by `portal
    resume --policy KEY=VALUE` replaced, the others kept (docs/policies.md)."""
    merged = dict(saved) if isinstance(saved, dict) else {}
    merged.update(given or {})
    return merged


def _start(job_dir, make_runtime, policy):
    problem = store.problem()
    if problem is not None:
        raise ResumeError(f"store: {problem}")
    job_id = os.path.basename(os.path.abspath(job_dir))
    path = os.path.join(job_dir, "checkpoint")
    try:
        manifest = read.read_manifest(path, job_id=job_id)
    except checkpoint.CheckpointError as e:
        raise ResumeError(str(e)) from None
    context = manifest.get("runtime") or {}
    if not context.get("main_filename"):
        raise ResumeError("checkpoint: manifest.json: it names no main script (not a "
                          "checkpoint of portal-run's)")
    # The runtime decides what is user code and arms the fixture as it did when the
    # job started: from the job's own working directory and environment.
    try:
        os.chdir(context.get("cwd") or os.getcwd())
    except OSError as e:
        raise ResumeError(f"the job's working directory {store.shown(context.get('cwd'))}: "
                          f"{str(e.strerror or e).lower()}") from None
    for name in ("PYTHONPATH", job_contract.ENV_FAKE_OOM):
        value = (context.get("environ") or {}).get(name)
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    runtime = make_runtime(context["main_filename"], job_dir=job_dir, module=context.get("module"),
                           command=context.get("command"),
                           extra_user_code=context.get("user_code", ()),
                           policy=_policy_of(context.get("policy"), policy))
    recompiler = runtime.recompiler()
    figures = {}
    try:
        manifest, state = read.read_checkpoint(path, recompiler, job_id=job_id,
                                               main_module=sys.modules["__main__"], figures=figures)
        # The main script's code, which the restored state may not have needed (a
        # loop at module level, no function of the script saved): compiled by the
        # same recompiler, so that __main__'s functions and frame share one code tree.
        main_filename = context["main_filename"]
        recompiler.root(main_filename, (manifest.get("sources") or {}).get(main_filename))
    except checkpoint.CheckpointError as e:
        raise ResumeError(str(e)) from None
    except CodeChanged as e:
        raise ResumeError(str(checkpoint.SourceChanged(e.filename, e.reason))) from None
    _apply_process_state(state.process)
    runtime.resume_path = list(state.process.path)   # the program's, set by boot.py
    if runtime.fake_oom is not None and state.fake_oom is not None:
        runtime.fake_oom.counts[:] = state.fake_oom
        runtime.fake_oom.arm()
    main_code = runtime.main_code()
    chain = build_chain(state.frames, main_code)
    handled = getattr(state.frames[-1], "handled", None) if state.frames else None
    del state
    job = jobs.Job(job_dir)
    if safepoint.pending() == safepoint.PREEMPTED:
        _preempted_while_restoring(job)   # exits 75: nothing of the program ran
    try:
        # the checkpoint's read, verified, for `portal show` (checkpoint_read {bytes, seconds})
        # and the policies the resumed run has (`portal show`), when --policy changed them
        changed = {"policies": dict(runtime.policy)} if policy else {}
        job.update_record(state="running", checkpoint_read=figures, **changed)
    except (store.PortalError, OSError) as e:
        raise ResumeError(f"job {job_id}: its record cannot be updated ({store.shown(e)})") from None
    _frames.resume(chain, EMPTY, handled)
    return runtime, main_code, sys.modules["__main__"].__dict__
