"""Bootstrap of the interpreter process started by portal-run.

portal-run starts Debian's /usr/bin/python3 as

    python3 -P -c "<line that puts our package dir first on sys.path and calls main()>" \
            MODE TARGET N SPELLING... ARGS...

(-P: the working directory is not on sys.path while python and Portal start, so
that nothing they import can come from it; main() gives the program python's own
sys.path and sys.flags.safe_path)
(MODE is script, module or command; the N words of SPELLING are the program as
typed, e.g. `-m mod` or `-mmod`, which python keeps in sys.orig_argv) so that
the program runs in the real interpreter binary at full speed.  main() then makes the process look exactly as
if it had been started as `python3 TARGET ARGS`, `python3 -m TARGET ARGS` or
`python3 -c TARGET ARGS`: sys.argv, sys.orig_argv, sys.path[0], the __main__
module, tracebacks and exit status.
"""
import os
import sys

from _portal import job_contract  # the environment variables' names (contract/job_record.json)

# The imports inside functions here are the start-up's order, not laziness: each
# comes after sys.path, sys.modules or the environment are what it must see (or
# must not leave a trace in), and the program never sees any of them.


class _Boot:
    """What portal-run handed this process and what start-up set aside, passed from
    main() to the stage that starts the program (none of it seen by the program)."""

    def __init__(self, package_dir):
        self.package_dir = package_dir  # the -c line put it first on sys.path
        self.linecache = None       # where the -c runner keeps the source it runs, or None
        self.job_dir = None         # the job's directory (portal-run's), or None
        self.user_code = []         # portal-run --user-code PATH...
        self.policy = {}            # portal-run --policy KEY=VALUE...
        self.portal_modules = {}    # Portal's modules, taken out of sys.modules

    def start_runtime(self, main_filename, **kwargs):
        """Portal's runtime for the program: the import hook that instruments the
        user's code, the rescue entry point, the fake-OOM fixture.  Exits 2 with a
        message for a bad PORTAL_FAKE_OOM.  The caller hides Portal's modules once
        its start-up is over."""
        sys.modules.update(self.portal_modules)
        from _portal.run.fake_oom import FakeOomSpecError
        try:
            from _portal.run.runtime import Runtime
            runtime = Runtime(main_filename, **kwargs)
        except FakeOomSpecError as e:
            sys.stderr.write(f"portal: PORTAL_FAKE_OOM: {e}\n")
            raise SystemExit(2) from None
        runtime.install()
        return runtime

    def runtime_for(self, main_filename, **kwargs):
        """start_runtime with portal-run's settings for this run."""
        return self.start_runtime(main_filename, extra_user_code=self.user_code,
                                  policy=self.policy, job_dir=self.job_dir, **kwargs)


def main():
    # The -c line put our package directory first; the program must not see it.
    # Under -P nothing else is before the interpreter's own path: neither Portal
    # nor what it imports is looked for in the working directory.  Python's entry
    # for the program is put there after Portal's start-up (_set_path0).
    boot = _Boot(sys.path.pop(0))
    _give_back_safe_path()
    boot.linecache = _forget_bootstrap_line(sys.argv[1] == "command", boot.package_dir)
    # The job this run belongs to (portal-run's supervisor made it): never seen by
    # the program, as none of PORTAL_* below.
    boot.job_dir = os.environ.pop(job_contract.ENV_JOB_DIR, None)
    from _portal.run import lines
    lines.take(os.environ.pop(lines.VARIABLE, None))   # the supervisor's mark: lines.py
    _check_store(boot)
    _keep_job_lock_to_this_process(os.environ.pop(job_contract.ENV_LOCK_FD, ""))
    _give_back_user_preload(os.environ.pop(USER_PRELOAD_VARIABLE, None))
    if sys.argv[1] == "resume":
        from _portal import _toplevel
        return _resume(_toplevel, boot, sys.argv[2])
    mode, target, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    spelling, args = sys.argv[4:4 + n], sys.argv[4 + n:]
    from _portal import _toplevel
    boot.portal_modules = _forget_imports(boot.package_dir)
    # portal-run's settings for the runtime: never seen by the program.
    extra = os.environ.pop(job_contract.ENV_USER_CODE, "")
    boot.user_code = [p for p in extra.split(os.pathsep) if p]
    boot.policy = _boot_policy()
    sys.orig_argv[1:] = spelling + args
    if mode == "script":
        _run_script(_toplevel, boot, target, args)
    elif mode == "module":
        _run_module(_toplevel, boot, target, args)
    elif mode == "command":
        _run_command(_toplevel, boot, target, args)
    else:
        raise SystemExit(f"portal: boot: unknown mode {mode!r}")


# portal-run put the memory tripwire's allocation check first in LD_PRELOAD for
# this interpreter only (include/portal/alloc_preload.hpp) and saved the user's
# value here: "=VALUE" when it was set, "" when it was not.
USER_PRELOAD_VARIABLE = job_contract.ENV_USER_LD_PRELOAD


def _give_back_user_preload(saved):
    """The program and its exec'd children see LD_PRELOAD as under python; the
    library stays loaded in this process (and its fork children)."""
    if saved is None:
        return
    if saved.startswith("="):
        os.environ["LD_PRELOAD"] = saved[1:]
    else:
        os.environ.pop("LD_PRELOAD", None)


def _forget_bootstrap_line(command_mode, package_dir):
    """An interpreter whose -c runner keeps the source of the code it runs for
    its tracebacks (CPython 3.13: linecache._register_code(), imported for it
    just before the code runs) kept portal-run's bootstrap line, as `<string>`.
    That entry is forgotten here.  So is linecache when the runner imported it
    (only Portal's own modules come after it in sys.modules: what site imported
    comes before 'site'), except for a -c program, under which python has it as
    well, and the path importer its import cached for the working directory
    (python's sys.path[0] is '' under -c; under portal-run's -P there is none,
    and it is made here as python made it, after site's).  Returns linecache, or
    None for an interpreter that keeps no -c source (then neither does
    _keep_command_source)."""
    linecache = sys.modules.get("linecache")
    kept = getattr(linecache, "_interactive_cache", None)
    ours = [key for key in kept if key[0] == _COMMAND_FILENAME] if kept else []
    if not ours:
        return None
    for key in ours:
        del kept[key]
    names = list(sys.modules)
    if command_mode:
        try:
            _get_importer(os.getcwd())
        except OSError:
            pass  # no working directory: python cached none either
        return linecache
    if not all(_is_portal_module(n) for n in names[names.index("linecache") + 1:]):
        return linecache
    del sys.modules["linecache"]
    try:
        cwd = os.getcwd()
    except OSError:
        return linecache
    importers = list(sys.path_importer_cache)
    if cwd in importers and all(_in_package(p, package_dir)
                                for p in importers[importers.index(cwd) + 1:]):
        del sys.path_importer_cache[cwd]
    return linecache


def _in_package(path, package_dir):
    return path == package_dir or path.startswith(package_dir + os.sep)


def _is_portal_module(name):
    return name == "_portal" or name.startswith("_portal.")


def _keep_command_source(boot, code, command):
    """A -c program's source, kept for its tracebacks as the interpreter's -c
    runner keeps it, linecache imported (for the code that runs: the
    instrumented code has the same names and first lines)."""
    if boot.linecache is not None:
        # A resumed job's was forgotten at boot, and may have been imported again.
        linecache = sys.modules.setdefault("linecache", boot.linecache)
        # python's command line parser appends a newline to the -c string it runs
        linecache._register_code(code, command + "\n", _COMMAND_FILENAME)


def _check_store(boot):
    """The job store, made absolute now (before the program can chdir) and
    checked once (store/trust.py).  A refused store is not used at all by this run; the
    program runs as under python, without rescue.  portal-run's supervisor says
    so itself when it refused the store (then it gave no job); when it did not,
    it is said here, once."""
    seen = set(sys.modules)
    from _portal.store import trust as store
    problem = store.boot(os.environ, supervised=True)
    # What the check imported (errno ...) lives on in store's own references;
    # the program finds sys.modules as python leaves it (Portal's own modules are
    # forgotten by _forget_imports).
    for name in [n for n in sys.modules if n not in seen and not n.startswith("_portal")]:
        del sys.modules[name]
    if problem is not None and boot.job_dir is not None and sys.argv[1] != "resume":
        boot.job_dir = None
        sys.stderr.write(f"portal: store: {problem}; the program runs, but cannot be "
                         f"suspended\n")


def _keep_job_lock_to_this_process(text):
    """The supervisor handed this process a descriptor of the job's lock
    (PORTAL_LOCK_FD, include/portal/job_lock.hpp): the job stays locked for as
    long as this interpreter runs, even if its supervisor was killed.  Its
    children must not keep it locked once the job has ended: the descriptor is
    made close-on-exec (no subprocess gets it) and is closed in every child forked
    by os.fork() or multiprocessing (DataLoader workers).  Closing our copy there
    does not release the lock, which the open file description keeps for us."""
    if not text.isdigit():
        return
    fd = int(text)
    try:
        os.set_inheritable(fd, False)
    except OSError:
        return  # not open: only the supervisor holds the lock
    os.register_at_fork(after_in_child=lambda: _close_quietly(fd))


def _close_quietly(fd):
    try:
        os.close(fd)
    except OSError:
        pass  # the program closed it itself


def _forget_imports(package_dir):
    """Take Portal's own modules out of sys.modules and sys.path_importer_cache,
    which a program can read: under python neither holds them.  The functions
    running now keep their modules alive; the runtime keeps them to put back
    when it needs more of its package (only at a rescue).  Returns them."""
    ours = {name: module for name, module in sys.modules.items()
            if name == "_portal" or name.startswith("_portal.")}
    for name in ours:
        del sys.modules[name]
    for path in list(sys.path_importer_cache):
        if _in_package(path, package_dir):
            del sys.path_importer_cache[path]
    return ours


# The file name python runs a -c program under (runtime.COMMAND_FILENAME; the
# runtime is not imported before the program's start-up).
_COMMAND_FILENAME = "<string>"


def _boot_policy():
    """The policies portal-run validated and handed over (PORTAL_BOOT_POLICY)."""
    text = os.environ.pop(job_contract.ENV_BOOT_POLICY, "")
    return dict(item.split("=", 1) for item in text.split(",") if "=" in item)


def _forget_start_up(boot, seen_modules, seen_importers):
    """Forget the modules and path importers that Portal's start-up added; return
    Portal's own modules (the runtime keeps them for a rescue).  The modules
    Portal borrowed (ast for the instrumenter ...) live on in Portal's own
    references; a program that imports them gets its own, as under python."""
    ours = {}
    for name in [n for n in sys.modules if n not in seen_modules or n.startswith("_portal")]:
        module = sys.modules.pop(name)
        if name == "_portal" or name.startswith("_portal."):
            ours[name] = module
    ours.update(boot.portal_modules)
    for path in [p for p in sys.path_importer_cache if p not in seen_importers]:
        del sys.path_importer_cache[path]
    return ours


def _get_importer(path):
    """CPython's get_path_importer(): python looks the script up this way (a zip or a
    directory would have an importer), leaving its path in sys.path_importer_cache."""
    cache = sys.path_importer_cache
    if path in cache:
        return
    cache[path] = None
    for hook in sys.path_hooks:
        try:
            cache[path] = hook(path)
        except ImportError:
            continue
        return


def _set_argv(argv0, args):
    """sys.argv as python itself would have it."""
    sys.argv[:] = [argv0, *args]


def _give_back_safe_path():
    """sys.flags as python gives it: portal-run's -P set safe_path, which python
    sets only for PYTHONSAFEPATH (a non-empty value, not ignored under -E).  The
    program (and subprocess, multiprocessing, which pass the flags on to the
    pythons they start) sees python's value."""
    flags = sys.flags
    if not flags.safe_path:
        return  # an interpreter started without portal-run's -P (tests)
    if os.environ.get("PYTHONSAFEPATH") and not flags.ignore_environment:
        return  # the user's own
    from _portal import _toplevel
    index = type(flags).__match_args__.index("safe_path")
    sys.flags = _toplevel.with_field(flags, index, False)


def _set_path0(path0):
    """CPython prepends the program's directory (the script's, the working
    directory for -m, '' for -c) unless -P/PYTHONSAFEPATH is set: python's entry,
    put first just before the program starts (Portal started without it)."""
    if sys.flags.safe_path:
        return
    sys.path.insert(0, path0)


def _fresh_main_dict():
    """The __main__ namespace exactly as the interpreter made it before running -c."""
    main = sys.modules["__main__"]
    return main.__dict__


def _exit(toplevel, status):
    """Leave with python's exit status for an uncaught exception (already reported).
    The recursion levels lent to the bootstrap for its last steps after the
    program's top level (it may have set a limit below the bootstrap's own depth)
    are taken back first: atexit handlers run at python's depth and limit."""
    leave = SystemExit(status) if status is not None else None  # made while lent
    toplevel.settle()
    if leave is not None:
        raise leave


def _run_script(toplevel, boot, path, args):
    _set_argv(path, args)
    # CPython makes the file name absolute by joining it to the working directory,
    # without normalising it ('./x.py' -> '/cwd/./x.py'); tracebacks show that name.
    filename = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
    try:
        with open(filename, "rb") as f:
            source = f.read()
    except OSError as exc:
        sys.stderr.write(f"{sys.orig_argv[0]}: can't open file {filename!r}: "
                         f"[Errno {exc.errno}] {exc.strerror}\n")
        raise SystemExit(2) from None

    # Portal's start-up (the runtime, the instrumented compile of the script)
    # happens before the program's sys.path[0] exists, and whatever it imported
    # is forgotten afterwards: the program finds sys.modules and
    # sys.path_importer_cache as python leaves them.
    seen_modules, seen_importers = set(sys.modules), set(sys.path_importer_cache)
    runtime = boot.runtime_for(filename)
    try:
        code = runtime.compile_main(filename, source)
        status = None
    except SyntaxError as exc:
        # python reports a script's syntax error with no traceback entries.
        status = toplevel.fail(exc.with_traceback(None), True)
    runtime.portal_modules = _forget_start_up(boot, seen_modules, seen_importers)

    _get_importer(filename)
    # sys.path[0] is the directory of the script with symbolic links resolved.
    _set_path0(os.path.dirname(os.path.realpath(path)))

    globals_ = _fresh_main_dict()
    globals_["__file__"] = filename
    globals_["__cached__"] = None
    # The class python uses, taken from where it takes it: importing
    # importlib.machinery would import importlib (and warnings) for the program.
    loader_type = sys.modules["_frozen_importlib"]._bootstrap_external.SourceFileLoader
    globals_["__loader__"] = loader_type("__main__", filename)
    del source
    if status is not None:  # the script's own syntax error, reported as python does
        globals_.pop("__file__", None)
        globals_.pop("__cached__", None)
        _exit(toplevel, status)
    _run_main(toplevel, runtime, code, globals_)


# From CPython 3.14 the file runner removes __main__'s __file__ and __cached__ when
# SystemExit ends the script too, before the atexit handlers run (measured with
# python3.14 in the forky root); up to 3.13 its SystemExit handler exits first and
# they stay.
MAIN_CLEANED_ON_SYSTEM_EXIT = sys.version_info >= (3, 14)


def _run_main(toplevel, runtime, code, globals_):
    """Run the script's code (fresh, or re-entering a suspended job's frames) and
    end as python's file runner does (a -c program as its string runner: the std
    streams not flushed before an uncaught error's traceback).  A SystemExit from
    the program propagates from here with __file__ still set, as under python up to
    3.13 (its handler exits before the clean-up below; MAIN_CLEANED_ON_SYSTEM_EXIT)."""
    try:
        status = toplevel.run(code, globals_, runtime.command is None)
    except SystemExit:
        if MAIN_CLEANED_ON_SYSTEM_EXIT:
            globals_.pop("__file__", None)
            globals_.pop("__cached__", None)
        raise
    del code
    if status is not None:
        runtime.explain_failure()
    # CPython removes them once the script is done (before atexit handlers run).
    globals_.pop("__file__", None)
    globals_.pop("__cached__", None)
    _exit(toplevel, status)


def _run_module(toplevel, boot, module, args):
    """`python3 -m MODULE`: runpy finds the module (through Portal's import hook,
    which instruments it when it is the user's code) and runs it in __main__'s
    dict, its frames below the module's, as under python."""
    # runpy replaces sys.argv[0] with the module's file once it is found.
    _set_argv("-m", args)
    seen_modules, seen_importers = set(sys.modules), set(sys.path_importer_cache)
    runtime = boot.runtime_for(None, module=module)
    # The module is compiled while the program runs (runpy finds it), where the
    # import hook's first import of the instrumenter would leave traces the
    # program can see (sys.path_importer_cache): imported now, with start-up's.
    from _portal.run import instrument  # noqa: F401
    runtime.portal_modules = _forget_start_up(boot, seen_modules, seen_importers)
    _set_path0(os.getcwd())
    import runpy
    status = toplevel.run(runpy._run_module_as_main, (module, True))
    if status is not None:
        runtime.explain_failure()
    _exit(toplevel, status)


def _run_command(toplevel, boot, command, args):
    """`python3 -c COMMAND`: the code string is the program's "script", compiled as
    python compiles it (file name `<string>`) with its loops instrumented; the
    manifest keeps the string (runtime.context), from which the resume compiles it
    again (checked against its sha256 like any source)."""
    _set_argv("-c", args)
    seen_modules, seen_importers = set(sys.modules), set(sys.path_importer_cache)
    sys.modules.update(boot.portal_modules)   # as start_runtime() does, for the name below
    from _portal.run.runtime import COMMAND_FILENAME
    runtime = boot.runtime_for(COMMAND_FILENAME, command=command)
    try:
        code = runtime.compile_main(COMMAND_FILENAME, command)
        status = None
    except SyntaxError as exc:
        status = toplevel.fail(exc.with_traceback(None))
    else:
        _keep_command_source(boot, code, command)
    runtime.portal_modules = _forget_start_up(boot, seen_modules, seen_importers)
    # python -c puts '' (the working directory) first on sys.path.
    _set_path0("")
    globals_ = _fresh_main_dict()
    if status is not None:
        _exit(toplevel, status)
        return
    _run_main(toplevel, runtime, code, globals_)


def _resume(toplevel, boot, job_dir):
    """`portal resume JOB`: continue the suspended program in this process."""
    from _portal.restore import resume as restore
    policy = _boot_policy()  # given again to portal resume: each key replaces the job's, the others kept
    try:
        runtime, main_code, globals_ = restore.start(job_dir, boot.start_runtime, policy or None)
    except restore.ResumeError as e:
        sys.stderr.write(f"portal: resume: {e}; the job stays suspended\n")
        raise SystemExit(1) from None
    if runtime.module is not None:
        # -m: runpy's frames below the module's, made again as python made them
        from _portal.restore import runmodule
        run, args = runmodule.resume_call(runtime.module, main_code, globals_)
        runtime.portal_modules = _forget_imports(boot.package_dir)
        sys.path[:] = runtime.resume_path
        status = toplevel.run(run, args)
        if status is not None:
            runtime.explain_failure()
        _exit(toplevel, status)
        return
    if runtime.command is not None:
        _keep_command_source(boot, main_code, runtime.command)
    runtime.portal_modules = _forget_imports(boot.package_dir)
    sys.path[:] = runtime.resume_path   # the program's own, as it was saved
    _run_main(toplevel, runtime, main_code, globals_)
