"""Resuming a `portal-run -m MODULE` job with runpy's frames below the module's.

Under `python3 -m pkg.train` the module's frame is called by runpy's
`_run_module_as_main` -> `_run_code` -> exec(): tracebacks, `traceback.print_stack()`
and `sys._getframe()` walks show those two frames.  The capture saves the frames
from the module's down (capture.py stops at __main__'s frame); the resume calls
`runpy._run_module_as_main` again, so that its frames are python's own, with two
of runpy's steps taken for it, each once, then put back:

  * `_get_module_details` (find the module, import its parent package, compile
    it) hands back the saved module's spec and the freshly compiled main code the
    restored chain starts with: the package is restored already, and compiling
    the module again would make a code object the chain does not know;
  * `_run_code` would set __main__'s __name__, __file__, __doc__ ... again, and
    __doc__ to None: the restored dict has them as they were.  Its stand-in only
    calls exec(), compiled under runpy's file name with the call on runpy's own
    line, so that a traceback reads `File "<frozen runpy>", line 88, in _run_code`.
"""
import sys

__all__ = ["resume_call"]

_RUN_CODE = """
def _run_code(code, run_globals, init_globals=None, mod_name=None, mod_spec=None,
              pkg_name=None, script_name=None):
    _portal_put_back()
    exec(code, run_globals)
    return run_globals
"""
_RUN_CODE_EXEC_LINE = 5   # the line of exec() in _RUN_CODE (line 1 is blank)


def _exec_line(runpy):
    """The line of _run_code's call of exec() in this Python's runpy (88 in 3.11.2)."""
    code = runpy._run_code.__code__
    raw = code.co_code
    positions = list(code.co_positions())
    try:
        index = code.co_names.index("exec")
    except ValueError:
        return None
    from _portal.bytecode.tables import T    # the version's opcode numbers (opcode only)
    load_global = T.OPMAP["LOAD_GLOBAL"]
    for i in range(0, len(raw), 2):
        if raw[i] == load_global and T.global_name(raw[i + 1]) == index:
            return positions[i // 2][0]
    return None


def _stand_in_run_code(runpy, put_back):
    line = _exec_line(runpy)
    pad = "\n" * (line - _RUN_CODE_EXEC_LINE) if line and line > _RUN_CODE_EXEC_LINE else ""
    filename = runpy._run_code.__code__.co_filename
    ns = {"__name__": "runpy", "_portal_put_back": put_back}
    exec(compile(pad + _RUN_CODE, filename, "exec", dont_inherit=True), ns)
    return ns["_run_code"]


def resume_call(module, main_code, main_globals):
    """(callable, args) for toplevel.run(): runpy's _run_module_as_main(module, True)
    with its two steps taken once for the restored module (the module docstring)."""
    import runpy
    spec = main_globals.get("__spec__")
    real_details, real_run_code = runpy._get_module_details, runpy._run_code

    def put_back():
        runpy._get_module_details = real_details
        runpy._run_code = real_run_code

    def module_details(mod_name, error=ImportError):
        runpy._get_module_details = real_details
        return getattr(spec, "name", mod_name), spec, main_code

    runpy._get_module_details = module_details
    runpy._run_code = _stand_in_run_code(runpy, put_back)
    return runpy._run_module_as_main, (module, True)
