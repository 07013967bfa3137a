"""Restore: a suspended job continues in a new process (DESIGN.md §3.6).

The stages, in order:
  1. read the checkpoint: owners and modes, the manifest's HMAC (made with the
     user's key), versions, checksums and sources verified before any unpickling
     or any use of the manifest (checkpoint.py, docs/security.md); a refusal is a
     ResumeError and changes nothing of the job
  2. put the process back: working directory, environment, sys.argv, sys.path
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

from _portal import _frames
from _portal.codeindex import CodeChanged
from _portal.generators import placeholders as _placeholders
from _portal.state import EMPTY


def _apply_process_state(process):
    os.chdir(process.cwd)
    os.environ.clear()
    os.environ.update(process.environ)
    sys.argv[:] = process.argv
    sys.orig_argv[:] = process.orig_argv
    sys.path[:] = process.path
    if process.random_state is not None:
        random.setstate(process.random_state)
    if process.numpy_state is not None:
        import numpy
        numpy.random.set_state(process.numpy_state)
    from _portal import plugins
    plugins.restore_process(getattr(process, "plugins", None))


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
            if call.kind == "call":
                stack += [EMPTY, reenter] + [None] * call.nargs
            else:  # call_ex: f(*args, **kwargs) with the callable's operands re-made
                stack += [EMPTY, reenter, ()] + ([{}] if call.has_kwargs else [])
        chain.append((code, fs.locals, stack, fs.offset))
    return chain


class ResumeError(Exception):
    """The job cannot be resumed; it stays suspended, intact."""


def start(job_dir, make_runtime, policy=None):
    """Stages 1-4: returns (runtime, main code, __main__'s globals) with the chain
    ready to be entered by running main code.  make_runtime(main_filename, job_dir=,
    extra_user_code=) builds and installs the runtime."""
    from _portal import checkpoint, jobs
    path = os.path.join(job_dir, "checkpoint")
    try:
        manifest = checkpoint.read_manifest(path)
    except checkpoint.CheckpointError as e:
        raise ResumeError(str(e)) from None
    context = manifest.get("runtime") or {}
    # The runtime decides what is user code and arms the fixture as it did when the
    # job started: from the job's own working directory and environment.
    os.chdir(context.get("cwd") or os.getcwd())
    for name in ("PYTHONPATH", "PORTAL_FAKE_OOM"):
        value = (context.get("environ") or {}).get(name)
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    runtime = make_runtime(context["main_filename"], job_dir=job_dir, module=context.get("module"),
                           extra_user_code=context.get("user_code", ()),
                           policy=policy if policy is not None else context.get("policy"))
    recompiler = runtime.recompiler()
    try:
        manifest, state = checkpoint.read_checkpoint(path, recompiler,
                                                     main_module=sys.modules["__main__"])
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
    if runtime.fake_oom is not None and state.fake_oom is not None:
        runtime.fake_oom.counts[:] = state.fake_oom
        runtime.fake_oom.arm()
    main_code = runtime.main_code()
    chain = build_chain(state.frames, main_code)
    handled = getattr(state.frames[-1], "handled", None) if state.frames else None
    del state
    job = jobs.Job(job_dir)
    job.update_record(state="running")
    _frames.resume(chain, EMPTY, handled)
    return runtime, main_code, sys.modules["__main__"].__dict__
