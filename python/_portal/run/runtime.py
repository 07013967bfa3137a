"""Portal inside the interpreter process.

Set up by the bootstrap before the program starts (install()), then idle: it is
consulted only when an exception reaches a wrapped loop (rescue/entry.py).  It owns
what the stages share: which code is the user's, the registry of the code
compiled for it, the fake-OOM fixture, and the job.
"""
import builtins
import os
import sys

from _portal.run import codeindex, importhook, usercode
from _portal.rescue import entry as rescue_module
from _portal.run.fake_oom import FakeOom
from _portal import ITERATION_NAME, RESCUE_NAME   # the builtins the instrumented code calls
from _portal import job_contract  # the environment variables' names (contract/job_record.json)

# What only a rescue, a recompile or an exit line needs (suspend, instrument,
# handlers) is imported there, from the modules kept aside (portal_modules):
# every run would otherwise pay for its import at start-up.

# The file name python compiles a `-c` program under (its tracebacks say `File
# "<string>"`): the code string is the main script, kept in the manifest.
COMMAND_FILENAME = "<string>"


class Runtime:
    # Portal's own modules, taken out of sys.modules once start-up is over (the
    # program must not see them) and put back for a rescue.
    portal_modules = {}

    def __init__(self, main_filename, job_dir=None, extra_user_code=(), fake_oom=None, policy=None,
                 module=None, command=None):
        # absolute, as compiled (co_filename); for `-m MODULE` (module: its name)
        # None until runpy has found the module (main_filename then reads it)
        self._main_filename = main_filename
        self.module = module
        self.command = command   # `-c COMMAND`: the code string (main_filename is COMMAND_FILENAME)
        self.job_dir = job_dir
        self.policy = dict(policy or {})  # {"oom.on": "false"}: recorded with the job
        self.rescue_enabled = self.policy.get("oom.on", "true") != "false"
        self.registry = codeindex.REGISTRY
        # -m: the user's code is under the working directory and PYTHONPATH, as
        # when the module was first found (not the module's own directory)
        script_dir = os.path.dirname(os.path.realpath(main_filename)) \
            if main_filename and module is None else os.getcwd()
        self.extra_user_code = list(extra_user_code)
        self.user_code = usercode.UserCode.from_environment(
            script_dir, os.getcwd(), os.environ.get("PYTHONPATH", ""), self.extra_user_code)
        self.fake_oom = fake_oom if fake_oom is not None else FakeOom.from_environment()
        self.declined = {}  # id(exception) -> [reason, ...] for the loops that declined it
        self.passed_over = {}  # id(exception) -> [(id(frame), "the loop at F:L in f()", reason)] (suspend.py)
        # (id(exception), id(its innermost traceback entry), reason): the last error
        # a loop left to a handler of the program's own (decide.py)
        self.left_to_handler = None
        # The interpreter's own sys.path as Portal's start-up imported from it:
        # neither the working directory nor the program's directory (boot.py), in
        # which Portal's imports at a rescue are looked for (rescue()).
        self.base_path = list(sys.path)
        self.program_path = None   # the program's sys.path while a rescue runs
        self.capture_failed = set()  # id(exception) whose checkpoint could not be written

    @property
    def main_filename(self):
        """The main program's file: the script, or the module `-m` runs (its
        spec's origin, once runpy has found it and set __main__.__spec__)."""
        if self._main_filename is None and self.module is not None:
            spec = sys.modules["__main__"].__dict__.get("__spec__")
            origin = getattr(spec, "origin", None)
            if getattr(spec, "name", None) == self.module and isinstance(origin, str):
                self._main_filename = origin
        return self._main_filename

    # ---- set-up ------------------------------------------------------------------

    def install(self):
        from _portal.state import plugins
        importhook.install(self.user_code, fake_oom=self.fake_oom, registry=self.registry,
                           patches=plugins.import_patches())
        # The builtins the instrumented code calls run unseen by the program's
        # sys.settrace/sys.setprofile functions: under python they do not exist.
        from _portal import _toplevel
        from _portal.fidelity import iteration
        self.rescuer = rescue_module.Rescuer(self)
        setattr(builtins, RESCUE_NAME, _toplevel.Untraced(self.rescuer.rescue))
        setattr(builtins, ITERATION_NAME, _toplevel.Untraced(iteration.iteration_start))
        self.rescuer.arm_reserve()
        from _portal.rescue import safepoint
        safepoint.install(self)   # portal-run's preemption requests (docs/preemption.md)
        if self.fake_oom is not None:
            self.fake_oom.arm()

    def compile_main(self, filename, source):
        """The main script's code, instrumented (and cached) like a user module."""
        return importhook.compile_main(filename, source, fake_oom=self.fake_oom, registry=self.registry)

    def main_code(self):
        """The code object __main__ runs (the latest compilation of the main script)."""
        try:
            return self.registry.entry(self.main_filename)[0]
        except KeyError:
            return None  # `-m` of a module that is not the user's code: never instrumented

    def is_program_file(self, filename):
        """Is `filename` the program's own code: its main file or a file of its
        user code (what Portal instruments, and what a rescue calls the program's)?"""
        return filename == self.main_filename or self.user_code.is_user_file(filename)

    def recompiler(self):
        """Compiles a saved source exactly as the import hook compiled it."""
        specs = self.fake_oom.specs if self.fake_oom is not None else None

        def compile_fn(source, filename):
            from _portal.run import instrument
            wrap = self.is_program_file(filename)
            fake = importhook.fake_oom_lines(filename, specs)
            return instrument.compile_user_source(source, filename, fake, wrap=wrap)

        if self.command is None:
            return codeindex.Recompiler(compile_fn, registry=self.registry)
        command = self.command.encode("utf-8", "surrogateescape")

        def read_fn(filename):
            return command if filename == COMMAND_FILENAME else codeindex._read_file(filename)

        return codeindex.Recompiler(compile_fn, registry=self.registry, read_fn=read_fn)

    # ---- the rescue ----------------------------------------------------------------

    def enter_rescue(self):
        """What the rescue imports (resource, pickle, json, tempfile ...) comes from
        where Portal's start-up took its modules, never from the working directory
        or the program's directory that python put first on sys.path: the
        program's own list is set aside (and saved with the job) until
        leave_rescue() puts it back, the same list object (the item skipped, or
        declined)."""
        self.program_path = sys.path[:]
        sys.path[:] = self.base_path

    def leave_rescue(self):
        sys.path[:] = self.program_path
        self.program_path = None

    def rescue(self, loop_frame, loop_line, exc):
        """Between enter_rescue() and leave_rescue() (rescue/entry.py)."""
        sys.modules.update(self.portal_modules)  # the rest of the package loads from here
        from _portal.rescue import suspend
        return suspend.rescue(self, loop_frame, loop_line, exc)   # True: the item was skipped

    def context(self):
        """What the resuming process needs to set the runtime up as it was."""
        context = {"main_filename": self.main_filename, "module": self.module, "cwd": os.getcwd(),
                   "user_code": self.extra_user_code, "policy": self.policy,
                   "environ": {k: os.environ[k] for k in ("PYTHONPATH", job_contract.ENV_FAKE_OOM)
                               if k in os.environ}}
        if self.command is not None:
            context["command"] = self.command
        return context

    def explain_failure(self):
        """The program ends with an uncaught out-of-memory error: one `portal:` line
        per reason it was not rescued (the product page's table), after python's
        own traceback."""
        exc = getattr(sys, "last_value", None)
        if exc is None or not rescue_module.oom.is_out_of_memory(exc):
            return
        if not self.rescue_enabled:
            reasons = ["the oom policy is off (--policy oom.on=false): the job fails at once"]
        else:
            reasons = list(dict.fromkeys(self.declined.get(id(exc), ())))
            if not reasons:
                reasons = [self._no_loop_on_the_way(exc)]
        for reason in reasons:
            sys.stderr.write(f"portal: not rescued: {reason}\n")
        sys.stderr.flush()

    def _no_loop_on_the_way(self, exc):
        """No loop of the program's own code declined the error: the product page's
        two rows, raised outside the program's code (a library's own loop called at
        top level), or in it but outside any loop; said only where the traceback
        agrees (no entry of it inside a loop body Portal wrapped), else what did
        happen at the loops it passed."""
        tb = exc.__traceback__
        loops = []
        while tb is not None:
            loops = self._wrapped_loops_at(tb) + loops   # innermost first
            if tb.tb_next is None:
                break
            tb = tb.tb_next
        left = self.left_to_handler
        if loops and left is not None and left[:2] == (id(exc), id(tb)):
            return left[2]
        if loops:
            return (f"it passed through the loop at {loops[0]} of the program's own code, which "
                    f"gave no reason to let it go (a fault of Portal's; PORTAL_LOG=debug may say more)")
        if tb is not None:
            filename = tb.tb_frame.f_code.co_filename
            if filename != self.main_filename and not self.user_code.is_user_file(filename):
                at = filename if tb.tb_lineno is None else f"{filename}:{tb.tb_lineno}"
                return (f"it was raised outside the program's own code ({at}), "
                        f"with no loop of the program's on its way: there is no point of its own "
                        f"to continue from")
        return "it was raised outside any loop of the program's own code: there is no iteration to retry"

    def _wrapped_loops_at(self, tb):
        """['file:line'] of the wrapped loops of the program's own code whose body
        holds this traceback entry's instruction, innermost first."""
        code = tb.tb_frame.f_code
        filename = code.co_filename
        if filename != self.main_filename and not self.user_code.is_user_file(filename):
            return []
        try:
            from _portal.rescue import handlers
            return [f"{filename}:{line}" for line in handlers.wrapped_loop_lines(code, tb.tb_lasti)]
        except Exception:  # noqa: BLE001 - an exit line, never a new error
            return []
