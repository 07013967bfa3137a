"""`portal-run ARGS` must be indistinguishable from `/usr/bin/python3 ARGS`.

Each case runs a program of the corpus (tests/e2e/compat) both ways, from a fresh
copy of the corpus at the same path, with the same working directory, stdin and
environment, and requires byte-identical stdout and stderr and the same exit status
(python killed by signal N, returncode -N: portal-run is killed by signal N too).  Every case
runs twice: stdout and stderr on separate pipes, and both on one pipe, where the
interleaving of the two streams shows.  The cases' expected python exit status and
some expected output guard against a case that fails the same way under both.
"""
import dataclasses
import functools
import os
import py_compile
import re
import signal
import subprocess
import sys
import zipapp
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest

from conftest import PYTHON, READY, RUN_TIMEOUT, Comparison, assert_same, base_env, run_both


# --- corpus set-up that git cannot hold -----------------------------------------------

def symlink_from_other_dir(root: Path):
    (root / "links").mkdir()
    os.symlink("../linked/real_script.py", root / "links" / "alias.py")


def build_zipapp(root: Path):
    zipapp.create_archive(root / "zipapp_src", root / "app.pyz")


def compile_pyc(root: Path):
    py_compile.compile(str(root / "compiled_src.py"), cfile=str(root / "compiled.pyc"),
                       doraise=True)


@dataclasses.dataclass
class Case:
    id: str
    args: List[str]                   # after the interpreter; "{root}": the corpus copy
    rc: int = 0                       # python's exit status (-N: killed by signal N)
    expect: List[bytes] = dataclasses.field(default_factory=list)  # in python's output
    cwd: str = "."
    stdin: bytes = b""
    env: Optional[Dict[str, str]] = None
    setup: Optional[Callable[[Path], None]] = None
    signal: int = 0                   # sent once the program printed "ready" and blocks
    keys: Optional[List[tuple]] = None  # run in a terminal: (marker, keys typed after it)
    prefix: Optional[List[str]] = None  # a command that execs the launcher
    once: List[bytes] = dataclasses.field(default_factory=list)  # exactly once under Portal
    known_difference: str = ""        # a difference not fixed yet: the test must fail
    # A difference that is Portal's design, stated exactly: (python's bytes, the
    # bytes portal-run must print instead); everything else must still be equal.
    by_design: Optional[tuple] = None


def python_version(python: str) -> tuple:
    """(major, minor) of the interpreter under test, asked of it."""
    out = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"],
                         capture_output=True, check=True, timeout=60).stdout
    return tuple(int(part) for part in out.split())


# Some of the cases' guards on python's own output (check_expectations) are facts
# that differ between CPython versions; each is taken for the interpreter under
# test.  Measured on 3.11.2 and 3.13.5; the version each changed in is CPython's
# (3.12: "the recursion limit now applies only to Python code").
PY = python_version(PYTHON)
# The depth sys.setrecursionlimit() reports counts its own C call up to 3.11.
SET_LIMIT_OWN_LEVEL = 1 if PY < (3, 12) else 0
# RecursionError's message (a C comparison in range's loop counted up to 3.11,
# one level before the frames), and how many repeats of a looping recursion's
# line the traceback elides.
LOOPING_RECURSION = ((b"[Previous line repeated 995 more times]", b"in comparison")
                     if PY < (3, 12) else
                     (b"[Previous line repeated 996 more times]",
                      b"RecursionError: maximum recursion depth exceeded\n"))


def refused_at(depth: int) -> bytes:
    """The refusal of sys.setrecursionlimit(1) with `depth` Python frames on the stack."""
    return b"cannot set the recursion limit to 1 at the recursion depth %d" % (
        depth + SET_LIMIT_OWN_LEVEL)


# Where a warning attributed past the outermost frame (stacklevel=2 at module level)
# is reported: 3.13 says `<sys>:0`, 3.11 `sys:1` (3.12 unmeasured).
WARNING_PAST_THE_STACK = b"sys:1: " if PY < (3, 13) else b"<sys>:0: "
# `python -m` with a recursion limit of 4 set at the module's top level: 3.11
# refuses it in runpy's frames, counted with its C calls; 3.12+ counts runpy's
# two frames and the module's and allows it.
LOW_LIMIT_IN_RUNPY = ([b"cannot set the recursion limit to 4 at the recursion depth 5"]
                      if PY < (3, 12) else [b"limit 4\n", b"ValueError: with a low limit"])

# Whether __main__ still has __file__ when atexit handlers run after sys.exit():
# up to 3.13 python's SystemExit handler exits before the file runner removes it;
# 3.14 removes it first (measured with python3.14 in the forky root).
FILE_KEPT_AFTER_SYS_EXIT = b"True" if PY < (3, 14) else b"False"

# Whether `importlib.machinery` is reachable when a program starts: not on a bare
# Debian python, but a .pth an installed package brings (matplotlib's, certifi's) can
# import it at python's start: asked of PYTHON, as the comparison then requires
# portal-run to print the same.
MACHINERY_AT_START = subprocess.run(
    [PYTHON, "-c", "import importlib; print(hasattr(importlib, 'machinery'))"],
    capture_output=True, check=True, env=base_env(), timeout=RUN_TIMEOUT).stdout.strip()

# Portal's import hook (the finder that instruments the user's own modules) sits in
# sys.meta_path right before importlib's PathFinder: the one thing of Portal's that
# a program can see there (docs/architecture.md).
PORTAL_FINDER = (b"'FrozenImporter', 'PathFinder']", b"'FrozenImporter', 'PortalFinder', 'PathFinder']")

# `nohup`-like: the launcher starts with SIGINT and SIGHUP ignored.
IGNORING_INT_HUP = ["sh", "-c", 'trap "" INT HUP; exec "$@"', "sh"]

CASES = [
    # stdout / stderr, buffering and interleaving, encodings
    Case("output_interleave", ["output_interleave.py"], expect=[b"out rest", b"err rest"]),
    Case("output_unbuffered", ["output_interleave.py"], env={"PYTHONUNBUFFERED": "1"},
         expect=[b"out rest"]),
    Case("output_large", ["output_large.py"], expect=[b"err after block 3", b"last line"]),
    Case("unicode_out", ["unicode_out.py"], expect=["✓ 日本語".encode()]),
    Case("unicode_ioencoding", ["unicode_out.py"],
         env={"PYTHONIOENCODING": "ascii:backslashreplace"}, expect=[b"\\u2713"]),
    Case("coding_cookie_latin1", ["coding_latin1.py"], expect=["café".encode()]),
    Case("coding_cookie_error", ["coding_latin1_error.py"], rc=1, expect=[b"ValueError"]),
    Case("utf8_bom", ["bom_script.py"], expect=[b"BOM script"]),
    Case("crlf_line_endings", ["crlf_script.py"], rc=1, expect=[b"from a CRLF file"]),
    # sys.argv, sys.orig_argv: everything after the script is the script's
    Case("argv_options_after_script",
         ["argv_show.py", "--help", "-m", "json", "--version", "-c", "x", "--", "-"],
         expect=[b"'--help', '-m', 'json', '--version'"]),
    Case("argv_odd_values", ["argv_show.py", "", "two words", "ünï", "\udcff", "-"],
         expect=[b"'\\udcff'"]),
    Case("argv_after_double_dash", ["--", "argv_show.py", "--help"], expect=[b"'--help'"]),
    # sys.path[0], __file__, sys.argv[0] for the ways of naming the script
    Case("path_plain", ["path_show.py"], expect=[b"path0 /"]),
    Case("path_relative_subdir", ["sub/where.py"], expect=[b"beside sub/where.py"]),
    Case("path_dot_slash", ["./where.py"], cwd="sub", expect=[b"beside sub/where.py"]),
    Case("path_parent_dir", ["../sub/where.py"], cwd="mypkg", expect=[b"/mypkg/../sub/"]),
    Case("path_unnormalised", ["sub/../path_show.py"], expect=[b"/sub/../path_show.py"]),
    Case("path_absolute", ["{root}/sub/where.py"], cwd="mypkg", expect=[b"beside sub"]),
    Case("path_symlink_other_dir", ["links/alias.py"], setup=symlink_from_other_dir,
         expect=[b"links/alias.py", b"linked/real_helper.py"]),
    Case("path_safe_path", ["safe_path_show.py"], env={"PYTHONSAFEPATH": "1"},
         expect=[b"safe_path True", b"No module named 'mymod'"]),
    Case("path_pythonpath", ["pythonpath_show.py"], env={"PYTHONPATH": "{root}/extra_path"},
         expect=[b"found through PYTHONPATH"]),
    # the __main__ module and the interpreter around it
    Case("main_identity", ["main_identity.py"], expect=[b"name __main__", b"main is me True"]),
    Case("sys_modules", ["sys_modules.py"],
         expect=[b"importlib.machinery reachable " + MACHINERY_AT_START]),
    Case("interpreter_state", ["interpreter_state.py"], expect=[b"flags"], by_design=PORTAL_FINDER),
    Case("interpreter_state_dot_path", ["./interpreter_state.py"], expect=[b"/./interpreter_"],
         by_design=PORTAL_FINDER),
    Case("user_imports", ["user_imports.py"], expect=[b"hello world from mypkg.sub"]),
    Case("user_imports_other_cwd", ["../user_imports.py"], cwd="sub", expect=[b"__main__"]),
    Case("stack_depth", ["stack_depth.py"],
         expect=[b"module frame back None", b"module depth 2", b"call stack is not deep"]),
    Case("main_pattern", ["main_pattern.py", "--times", "2", "hi"], expect=[b"hi\nhi\n"]),
    Case("main_pattern_help", ["main_pattern.py", "--help"], expect=[b"usage: main_pattern.py"]),
    Case("main_pattern_usage_error", ["main_pattern.py"], rc=2, expect=[b"required: word"]),
    Case("main_pattern_status", ["main_pattern.py", "fail"], rc=4),
    # the recursion limit: Portal's frames under the program do not count
    Case("recursion_runaway", ["recursion_runaway.py"], rc=1,
         expect=[b"[Previous line repeated 996 more times]", b"RecursionError"]),
    Case("recursion_runaway_in_loop", ["recursion_runaway.py", "in-loop"], rc=1,
         expect=[b"[Previous line repeated 996 more times]"]),
    Case("recursion_runaway_through_loops", ["recursion_runaway.py", "looping"], rc=1,
         expect=list(LOOPING_RECURSION)),
    Case("recursion_limit", ["recursion_limit.py"], rc=1,
         expect=[b"limit 1000", b"module level: " + refused_at(1), b"reach (998,",
                 b"limit set 120 reach (118,",
                 b"excepthook ValueError " + refused_at(2) + b": the limit is too low ['hook'] 998"]),
    Case("recursion_limit_module", ["-m", "recursion_limit"], rc=1, expect=[b"reach (99"]),
    Case("recursion_limit_command", ["-c", "import sys, runpy\n"
                                           "runpy.run_path('recursion_limit.py')"], rc=1,
         expect=[b"limit set 120"]),
    Case("recursion_limit_low", ["recursion_limit_low.py"],
         expect=[b"limit 4", b"atexit: " + refused_at(1) + b": the limit is too low 4"]),
    Case("recursion_limit_low_raise", ["recursion_limit_low.py", "raise"], rc=1,
         expect=[b"ValueError: with a low limit", b"atexit: cannot set"]),
    Case("recursion_limit_low_exit", ["recursion_limit_low.py", "exit"], rc=3,
         expect=[b"atexit: cannot set"]),
    Case("recursion_limit_low_module", ["-m", "recursion_limit_low", "raise"], rc=1,
         expect=[*LOW_LIMIT_IN_RUNPY, b"atexit: cannot set"]),
    Case("recursion_runaway_command", ["-c", "def f(): return f()\nf()"], rc=1,
         expect=[b"[Previous line repeated 996 more times]"]),
    # tracers and profilers: the instrumented loops' handlers and Portal's builtins
    # give no events of their own
    Case("trace_loops", ["trace_loops.py"],
         expect=[b"('exception', 'leave_for', 28, 'ValueError')", b"('P', 'return', 'nested', 55)",
                 b"('line', 'training', 117, '')", b"('return', 'leave_for', 28, 'None')",
                 b"('return', 'finally_in_loop', 97, 'None')", b"('return', 'ki', 77, 'None')"]),
    # uncaught exceptions and syntax errors
    Case("exception_uncaught", ["exc_uncaught.py"], rc=1, expect=[b"KeyError: 'missing'"]),
    Case("exception_chained", ["exc_chained.py"], rc=1,
         expect=[b"direct cause", b"During handling", b"while loading the configuration"]),
    Case("exception_in_user_module", ["exc_in_module.py"], rc=1,
         expect=[b"caught at import", b"exploded in failing_mod"]),
    Case("syntax_error_in_script", ["syntax_error_script.py"], rc=1, expect=[b"SyntaxError"]),
    Case("indentation_error_in_script", ["indent_error_script.py"], rc=1,
         expect=[b"IndentationError"]),
    Case("syntax_error_in_import", ["syntax_error_import.py"], rc=1,
         expect=[b"before the import", b"SyntaxError"]),
    # leaving: sys.exit and friends
    Case("exit_int", ["exit_with.py", "int", "3"], rc=3),
    Case("exit_zero", ["exit_with.py", "int", "0"]),
    Case("exit_str", ["exit_with.py", "str", "fatal: something broke"], rc=1,
         expect=[b"fatal: something broke"]),
    Case("exit_none", ["exit_with.py", "none"]),
    Case("exit_raise_systemexit", ["exit_with.py", "raise", "3"], rc=3),
    Case("exit_builtin", ["exit_with.py", "builtin", "4"], rc=4),
    Case("exit_object", ["exit_with.py", "object"], rc=1, expect=[b"['not', 'an', 'int']"]),
    Case("exit_in_finally", ["exit_with.py", "nested", "5"], rc=5, expect=[b"finally runs"]),
    Case("exit_256", ["exit_with.py", "int", "256"], rc=0),
    Case("exit_300", ["exit_with.py", "int", "300"], rc=44),
    Case("exit_negative", ["exit_with.py", "int", "-1"], rc=255),
    Case("os_exit", ["os_exit.py"], rc=7, expect=[b"flushed before _exit"]),
    Case("stdout_closed", ["stdout_closed.py"], rc=120, expect=[b"Bad file descriptor"]),
    # KeyboardInterrupt and signals (sent to python's pid / portal-run's pid)
    Case("keyboard_interrupt_raised", ["keyboard_interrupt_raise.py"], rc=-signal.SIGINT,
         expect=[b"KeyboardInterrupt", b"atexit still runs"]),
    Case("sigint", ["wait_for_signal.py"], rc=-signal.SIGINT, signal=signal.SIGINT,
         expect=[b"KeyboardInterrupt"]),
    Case("sigint_caught", ["ki_caught.py"], rc=3, signal=signal.SIGINT,
         expect=[b"caught KeyboardInterrupt"]),
    Case("sigterm", ["wait_for_signal.py"], rc=-signal.SIGTERM, signal=signal.SIGTERM),
    Case("sighup", ["wait_for_signal.py"], rc=-signal.SIGHUP, signal=signal.SIGHUP),
    Case("sigquit", ["wait_for_signal.py"], rc=-signal.SIGQUIT, signal=signal.SIGQUIT),
    *[Case(f"handler_{s.name.lower()}", ["signal_handler.py"], rc=10 + s, signal=s,
           expect=[f"got {s.name} in wait".encode()])
      for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)],
    Case("signals_ignored_at_start", ["ignored_signals.py"], prefix=IGNORING_INT_HUP,
         expect=[b"SIGINT <Handlers.SIG_IGN: 1>", b"SIGHUP <Handlers.SIG_IGN: 1>"]),
    Case("signals_ignored_at_start_sigint", ["ignored_signals.py", "wait"],
         prefix=IGNORING_INT_HUP, signal=signal.SIGINT, expect=[b"SIGINT was ignored"]),
    # stdin
    Case("stdin_read", ["stdin_read.py"], stdin=b"line one\nline two\n\xc3\xa9 no newline",
         expect=[b"'line one', 'line two'"]),
    Case("stdin_empty", ["stdin_read.py"], expect=[b"read 0 chars"]),
    Case("input_prompt", ["input_prompt.py"], stdin=b"Alice\n42\n", rc=1,
         expect=[b"Name: Age: hello Alice, 42", b"EOFError"]),
    Case("script_from_stdin", ["-", "arg"], rc=5,
         stdin=b"import sys\nprint(sys.argv, repr(sys.path[0]), __name__)\nraise SystemExit(5)\n",
         expect=[b"['-', 'arg']"]),
    # processes and threads
    Case("multiprocessing_fork", ["mp_fork.py"],
         expect=[b"start method fork", b"squares [0, 1, 4, 9", b"child exit code 5"]),
    Case("multiprocessing_spawn", ["mp_spawn.py"],
         expect=[b"cubes [42, 43, 50", b"__mp_main__", b"child exit code 0"]),
    Case("subprocess_sys_executable", ["subprocess_exe.py"],
         expect=[b"'--child'", b"failing child exit 1"]),
    Case("thread_outlives_main", ["thread_after_main.py"],
         expect=[b"worker finishes after main", b"Exception in thread broken"]),
    # warnings
    Case("warnings_default", ["warnings_show.py"],
         expect=[b"UserWarning: module-level", b"DeprecationWarning: deprecated in __main__",
                 WARNING_PAST_THE_STACK + b"UserWarning: attributed to the caller"]),
    Case("warnings_as_errors", ["warnings_show.py"], rc=1, env={"PYTHONWARNINGS": "error"},
         expect=[b"UserWarning: module-level user warning"]),
    # atexit
    Case("atexit_normal_end", ["atexit_handlers.py"],
         expect=[b"__file__ in globals: False", b"first registered, runs last ended"]),
    Case("atexit_after_sys_exit", ["atexit_handlers.py", "exit"], rc=6,
         expect=[b"__file__ in globals: " + FILE_KEPT_AFTER_SYS_EXIT]),
    Case("atexit_after_exception", ["atexit_handlers.py", "raise"], rc=1,
         expect=[b"sys.last_type: <class 'RuntimeError'>"]),
    Case("sys_exit_in_atexit", ["atexit_exit.py"], expect=[b"<Handler exits>"]),
    Case("sys_exit_in_atexit_status", ["atexit_exit.py", "2"], rc=2),
    # things python runs other than a source file
    Case("missing_script", ["no_such_script.py", "a"], rc=2, expect=[b"can't open file"]),
    Case("missing_directory", ["no_such_dir/x.py"], rc=2, expect=[b"can't open file"]),
    Case("directory_with_main", ["app_dir", "--flag"], expect=[b"app_dir/app_helper.py"]),
    Case("directory_without_main", ["nomain_dir"], rc=1, expect=[b"can't find '__main__'"]),
    Case("zipapp", ["app.pyz", "x"], setup=build_zipapp, expect=[b"app.pyz/zhelper.py"]),
    Case("zipapp_error", ["app.pyz", "fail"], rc=1, setup=build_zipapp,
         expect=[b"failure inside the zip application"]),
    Case("compiled_pyc", ["compiled.pyc", "x"], setup=compile_pyc, expect=[b"compiled.pyc"]),
    # -m MODULE
    Case("module", ["-m", "runme_module", "a", "--help"], expect=[b"name __main__"]),
    Case("module_attached_name", ["-mrunme_module", "a"], expect=[b"name __main__"]),
    Case("module_error", ["-m", "runme_module", "fail"], rc=1, expect=[b"exploded"]),
    Case("module_package", ["-m", "runme_pkg", "x"], expect=[b"relative import works"]),
    Case("module_missing", ["-m", "no_such_module"], rc=1, expect=[b"No module named"]),
    Case("module_syntax_error", ["-m", "bad_syntax_mod"], rc=1, expect=[b"SyntaxError"]),
    Case("module_json_tool", ["-m", "json.tool"], stdin=b'{"b": [1, 2], "a": "\\u00e9"}',
         expect=[b'"b": [']),
    Case("module_json_tool_options", ["-m", "json.tool", "--sort-keys", "--indent", "1"],
         stdin=b'{"b": 1, "a": {"c": null}}', expect=[b'{\n "a"']),
    Case("module_json_tool_bad_input", ["-m", "json.tool"], stdin=b"{nope", rc=1,
         expect=[b"Expecting property name"]),
    # -c CODE
    Case("command", ["-c", "import sys; print(sys.argv, sys.orig_argv, repr(sys.path[0]), "
                           "__name__, sorted(globals()))", "a", "--help"],
         expect=[b"['-c', 'a', '--help']"]),
    Case("command_state", ["-c", "import sys; print(list(sys.modules)); "
                                 "print(list(sys.path_importer_cache))"], expect=[b"'__main__'"]),
    Case("command_attached", ["-cimport sys; print(sys.argv, sys.orig_argv)", "a"],
         expect=[b"['-c', 'a']"]),
    Case("command_error", ["-c", "def f():\n    return 1 / 0\nprint('x')\nf()", "a"], rc=1,
         expect=[b"ZeroDivisionError"]),
    Case("command_syntax_error", ["-c", "print('x')\nx = ("], rc=1,
         expect=[b"was never closed"]),
    Case("command_exit", ["-c", "import sys; sys.exit('bye')"], rc=1, expect=[b"bye"]),
    Case("command_keyboard_interrupt", ["-c", "raise KeyboardInterrupt"], rc=-signal.SIGINT,
         expect=[b"KeyboardInterrupt"]),
    Case("command_stack", ["-c", "import sys, traceback, warnings\ntraceback.print_stack()\n"
                                 "print(sys._getframe().f_back)\n"
                                 "warnings.warn('w', stacklevel=2)\nwarnings.warn('v')"],
         expect=[WARNING_PAST_THE_STACK + b"UserWarning: w", b"<string>:5: UserWarning: v"]),
]


def check_expectations(case: Case, result: Comparison):
    output = result.python.stdout + (result.python.stderr or b"")
    assert result.python.returncode == case.rc, (
        f"the case no longer exercises what it is meant to: python3 exited "
        f"{result.python.returncode}, expected {case.rc}; output {output!r}")
    for piece in case.expect:
        assert piece in output, f"python3's output lacks {piece!r}: {output!r}"


def params(cases):
    return [pytest.param(c, id=c.id, marks=[pytest.mark.xfail(
                raises=AssertionError, strict=True, reason=c.known_difference)]
            if c.known_difference else []) for c in cases]


def compare(case: Case, result: Comparison):
    """portal-run's outcome must be python's, but for a difference by design."""
    python = result.python
    if case.by_design:
        before, after = case.by_design
        assert before in python.stdout, f"python3's output lacks {before!r}"
        python = dataclasses.replace(python, stdout=python.stdout.replace(before, after))
    assert_same(python, result.portal)
    check_expectations(case, result)


@pytest.mark.parametrize("merged", [False, True], ids=["split", "merged"])
@pytest.mark.parametrize("case", params(CASES))
def test_compat(case, merged, comparisons, request):
    result = comparisons[request.node.nodeid].result()
    compare(case, result)


# --- a real terminal: keys typed at the keyboard ------------------------------------
# The terminal sends SIGINT (Ctrl-C) or SIGQUIT (Ctrl-\\) to the whole foreground
# process group, portal-run and python alike: the supervisor must not forward it a
# second time (that would be a second KeyboardInterrupt in the middle of the first
# one's traceback), nor report a death the user asked for.

CTRL_C, CTRL_BACKSLASH, CTRL_D = b"\x03", b"\x1c", b"\x04"

TERMINAL_CASES = [
    Case("ctrl_c", ["wait_for_signal.py"], rc=-signal.SIGINT, keys=[(READY, CTRL_C)],
         expect=[b"^C", b"KeyboardInterrupt"], once=[b"KeyboardInterrupt"]),
    Case("ctrl_c_caught", ["ki_caught.py"], rc=3, keys=[(READY, CTRL_C)],
         expect=[b"caught KeyboardInterrupt"], once=[b"caught"]),
    Case("ctrl_c_handler", ["signal_handler.py"], rc=10 + signal.SIGINT, keys=[(READY, CTRL_C)],
         expect=[b"got SIGINT"], once=[b"got SIGINT"]),
    Case("ctrl_c_command", ["-c", "import time\nprint('ready', flush=True)\ntime.sleep(60)"],
         rc=-signal.SIGINT, keys=[(READY, CTRL_C)], expect=[b"KeyboardInterrupt"],
         once=[b"KeyboardInterrupt"]),
    Case("ctrl_c_module", ["-m", "wait_for_signal"], rc=-signal.SIGINT, keys=[(READY, CTRL_C)],
         expect=[b"KeyboardInterrupt"], once=[b"KeyboardInterrupt"]),
    Case("ctrl_backslash", ["wait_for_signal.py"], rc=-signal.SIGQUIT,
         keys=[(READY, CTRL_BACKSLASH)], expect=[b"ready\r\n^\\"]),
    Case("ctrl_backslash_handler", ["signal_handler.py"], rc=10 + signal.SIGQUIT,
         keys=[(READY, CTRL_BACKSLASH)], expect=[b"got SIGQUIT"], once=[b"got SIGQUIT"]),
    Case("tty_input", ["input_prompt.py"], rc=1,
         keys=[(b"Name: ", b"Bob\n"), (b"Age: ", b"7\n"), (b"More? ", CTRL_D)],
         expect=[b"Name: Bob\r\n", b"hello Bob, 7", b"EOFError"]),
]


@pytest.mark.parametrize("case", params(TERMINAL_CASES))
def test_terminal(case, comparisons, request):
    result = comparisons[request.node.nodeid].result()
    compare(case, result)
    for piece in case.once:
        assert result.portal.stdout.count(piece) == 1, result.portal.stdout


# --- running the cases ahead ----------------------------------------------------------

def comparison_job(item, portal_run, workdir):
    """What the test `item` compares, as a function to run."""
    case, merged = item.callspec.params["case"], item.callspec.params.get("merged", False)
    return functools.partial(run_both, portal_run, workdir, case.args, cwd=case.cwd,
                             stdin=case.stdin, env=case.env, setup=case.setup, merged=merged,
                             send_signal=case.signal, terminal=case.keys, prefix=case.prefix)


@pytest.fixture(scope="module")
def comparisons(request, portal_run, tmp_path_factory):
    """The comparisons of every selected test of this module, started at once on as
    many threads as there are CPUs (the runs wait on processes, and each case's two
    runs must still follow each other in its own directory); each test waits for
    its own.  Keyed by node id."""
    pool = ThreadPoolExecutor(max_workers=max(2, len(os.sched_getaffinity(0))))
    futures = {}
    for item in request.session.items:
        compares = "case" in getattr(getattr(item, "callspec", None), "params", {})
        if compares and item.module is sys.modules[__name__] and item.nodeid not in futures:
            workdir = tmp_path_factory.mktemp(re.sub(r"\W+", "_", item.name)[:60])
            futures[item.nodeid] = pool.submit(comparison_job(item, portal_run, workdir))
    yield futures
    pool.shutdown(cancel_futures=True)


# --- a -c program resumed -----------------------------------------------------------
# The resumed process runs the command's code again: its tracebacks must show the
# command's lines where python's do (3.13 keeps a -c program's source for them).

RESUMED_COMMAND = "def f(i):\n    return 1 / (i - 2)\nfor i in range(4):\n    print(i, f(i))\n"


def test_command_resumed_reports_as_python(portal_run, portal_cli, tmp_path):
    def run(cmd, **extra):
        env = base_env(dict(PORTAL_HOME=str(tmp_path / "home"), **extra))
        return subprocess.run(cmd, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=RUN_TIMEOUT)
    python = run([PYTHON, "-c", RESUMED_COMMAND])
    assert python.returncode == 1 and b"ZeroDivisionError" in python.stderr, python
    first = run([portal_run, "-c", RESUMED_COMMAND], PORTAL_FAKE_OOM="<string>:4@2")
    assert first.returncode == 75, first
    job = re.search(rb"portal resume (\S+)", first.stderr).group(1).decode()
    resumed = run([portal_cli, "resume", job])
    assert (resumed.returncode, first.stdout + resumed.stdout, resumed.stderr) == (
        python.returncode, python.stdout, python.stderr)
