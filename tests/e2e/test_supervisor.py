"""What portal-run does that `python3` has no counterpart for: its own options and
usage errors, the report of a death the program could not report itself
(SIGKILL, the kernel's out-of-memory killer), forwarding of the signals sent to
the supervisor alone, and `portal run`, the same through the `portal` command.
"""
import re
import signal
import subprocess
import time

import pytest

from conftest import (PYTHON, READY, RUN_TIMEOUT, assert_same, base_env, fresh_corpus,
                      interpreter_pid, read_until, run_both, run_program, wait_until_sleeping)


def run(cmd, cwd=None, stdin=b""):
    proc = subprocess.run(cmd, cwd=cwd, env=base_env(), input=stdin, capture_output=True,
                          timeout=RUN_TIMEOUT)
    return proc.stdout, proc.stderr, proc.returncode


@pytest.fixture
def corpus(tmp_path):
    return fresh_corpus(tmp_path)


# --- portal-run's own command line ----------------------------------------------------

def test_help(portal_run):
    out, err, rc = run([portal_run, "--help"])
    assert (rc, err) == (0, b"")
    assert b"portal-run [OPTIONS] SCRIPT [ARGS...]" in out
    assert b"-m MODULE" in out and b"-c CODE" in out and b"--version" in out


def test_version(portal_run):
    out, err, rc = run([portal_run, "--version"])
    assert (rc, err) == (0, b"")
    # ... and the interpreter a run would use (docs/interpreters.md): base_env's PORTAL_PYTHON.
    assert re.fullmatch(rb"portal-run \(portal\) \d+\.\d+\.\d+\npython: " + re.escape(PYTHON.encode()) +
                        rb" \(CPython 3\.\d+\.\d+, chosen by PORTAL_PYTHON\)\n", out), out


def test_unknown_option_before_the_script(portal_run, corpus):
    out, err, rc = run([portal_run, "--no-such-option", "argv_show.py"], cwd=corpus)
    assert rc == 2
    assert out == b""  # the script did not run
    assert err.startswith(b"portal: ") and b"--no-such-option" in err, err
    assert err.count(b"\n") == 1 and err.endswith(b"\n"), err


@pytest.mark.parametrize("args", [[], ["-m"], ["-c"]], ids=["nothing", "m_alone", "c_alone"])
def test_no_program(portal_run, args):
    out, err, rc = run([portal_run] + args)
    assert (rc, out) == (2, b"")
    assert err.startswith(b"portal: ") and err.endswith(b"\n") and err.count(b"\n") == 1, err


def test_options_after_the_script_are_the_scripts(portal_run, corpus):
    """--help and --version after the script are not portal-run's."""
    out, err, rc = run([portal_run, "argv_show.py", "--help", "--version"], cwd=corpus)
    assert (rc, err) == (0, b"")
    assert out.startswith(b"argv ['argv_show.py', '--help', '--version']\n"), out


# --- deaths the program cannot report -------------------------------------------------

SELF_KILL = ("import os, signal, sys\n"
             "print('about to die', flush=True)\n"
             "print('unflushed, lost')\n"
             "os.kill(os.getpid(), signal.{})\n")


@pytest.mark.parametrize("merged", [False, True], ids=["split", "merged"])
def test_sigkill_is_reported(portal_run, corpus, merged):
    """Killed by SIGKILL (as by the OOM killer): one line saying so, after exactly
    what python itself printed, and portal-run then killed by SIGKILL too (a parent
    sees python's death; a shell shows 137)."""
    args = ["-c", SELF_KILL.format("SIGKILL")]
    python = run_program([PYTHON] + args, corpus, base_env(), merged=merged)
    portal = run_program([portal_run] + args, corpus, base_env(), merged=merged)
    assert python.returncode == -signal.SIGKILL
    assert portal.returncode == -signal.SIGKILL
    stream = portal.stdout if merged else portal.stderr
    expected_head = python.stdout if merged else python.stderr
    assert stream.startswith(expected_head), (stream, expected_head)
    report = stream[len(expected_head):]
    assert report.startswith(b"portal: killed:") and report.endswith(b"\n"), report
    assert report.count(b"\n") == 1 and b"SIGKILL" in report, report
    if not merged:
        assert portal.stdout == python.stdout == b"about to die\n"


def test_other_fatal_signal_is_reported(portal_run, corpus):
    """A death by a signal nobody sent through the supervisor (here SIGABRT from
    os.abort()) is named too, and portal-run dies of it as python did."""
    out, err, rc = run([portal_run, "-c", "import os; print('x', flush=True); os.abort()"])
    assert (rc, out) == (-signal.SIGABRT, b"x\n")
    assert err.startswith(b"portal: killed:") and b"SIGABRT" in err and err.count(b"\n") == 1


# --- signals sent to the supervisor alone ---------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT],
                         ids=lambda s: s.name)
def test_signal_to_the_supervisor_is_forwarded(portal_run, corpus, sig):
    """`kill PID` of portal-run reaches the program (a separate process), whose
    handler's exit status portal-run then mirrors, with no report of its own."""
    proc = subprocess.Popen([portal_run, "signal_handler.py"], cwd=corpus, env=base_env(),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        head = read_until(proc.stdout.fileno(), READY, deadline, "signal_handler.py")
        child = interpreter_pid(proc.pid, deadline)
        assert child != proc.pid, "the program must run in a child of the supervisor"
        wait_until_sleeping(child, deadline)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert head + out == f"ready\ngot {sig.name} in wait\n".encode()
    assert (proc.returncode, err) == (10 + sig, b"")


def test_sigterm_default_kills_the_program_silently(portal_run, corpus):
    """SIGTERM to portal-run, forwarded, kills a program without a handler: portal-run
    dies of SIGTERM as python does, with no `portal: killed` line (it was the user's
    doing)."""
    result = run_both(portal_run, corpus.parent, ["wait_for_signal.py"],
                      send_signal=signal.SIGTERM)
    assert_same(result.python, result.portal)
    assert result.portal.returncode == -signal.SIGTERM
    assert b"portal:" not in result.portal.stderr


# --- `portal run` is portal-run --------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["argv_show.py", "--help", "x"],
    ["exc_uncaught.py"],
    ["exit_with.py", "int", "3"],
    ["-m", "runme_module", "a"],
    ["-c", "import sys; print(sys.argv); sys.exit('bye')", "--version"],
    ["no_such_script.py"],
], ids=["argv", "traceback", "exit_status", "module", "command", "missing_script"])
def test_portal_run_subcommand(portal_run, portal_cli, corpus, args):
    expected = run([portal_run] + args, cwd=corpus)
    assert run([portal_cli, "run"] + args, cwd=corpus) == expected
    # and both are python's
    assert run([PYTHON] + args, cwd=corpus) == expected


def test_portal_run_subcommand_signals(portal_run, portal_cli, corpus):
    """The supervisor of `portal run`: a forwarded SIGINT, and SIGKILL reported; each
    time it dies of the program's signal."""
    ki = run_program([portal_cli, "run", "wait_for_signal.py"], corpus, base_env(),
                     send_signal=signal.SIGINT)
    assert ki.returncode == -signal.SIGINT
    assert ki.stderr.endswith(b"\nKeyboardInterrupt\n") and b"portal:" not in ki.stderr
    out, err, rc = run([portal_cli, "run", "-c", SELF_KILL.format("SIGKILL")])
    assert (rc, out) == (-signal.SIGKILL, b"about to die\n")
    assert err.startswith(b"portal: killed:") and b"SIGKILL" in err


def test_portal_run_subcommand_own_options(portal_cli):
    out, err, rc = run([portal_cli, "run", "--help"])
    assert (rc, err) == (0, b"")
    assert b"portal run [OPTIONS] SCRIPT [ARGS...]" in out
    out, err, rc = run([portal_cli, "run", "--version"])
    assert (rc, err) == (0, b"")
    assert re.fullmatch(rb"portal run \(portal\) \d+\.\d+\.\d+\npython: .*\n", out), out
    out, err, rc = run([portal_cli, "run"])
    assert (rc, out) == (2, b"")
    assert err.startswith(b"portal: portal run: ") and err.count(b"\n") == 1, err
    out, err, rc = run([portal_cli, "run", "--no-such-option", "x.py"])
    assert (rc, out) == (2, b"")
    assert err.startswith(b"portal: ") and b"--no-such-option" in err, err


# --- what start-up imports --------------------------------------------------------------

# Modules a program that raises nothing must never pay for at start-up: the bytecode
# analysis, the capture and the pickler are imported when an error is rescued, and
# `ast` only when a script is instrumented (not when its cached code is used).  Each
# of them costs milliseconds (bytecode.liveness alone ~20 ms: start-up went from
# +24 ms to +45 ms over python when frame_locals.py imported it).
LAZY_MODULES = ("ast", "typing", "dataclasses", "pickle", "inspect",
                "_portal.bytecode.liveness", "_portal.bytecode.decode",
                "_portal.bytecode.resume_points", "_portal.bytecode.stack",
                "_portal.bytecode.carried", "_portal.rescue.capture", "_portal.rescue.suspend",
                "_portal.bytecode.codemap", "_portal.run.instrument")

def imported(stderr: bytes) -> set:
    """The modules a process imported, from PYTHONPROFILEIMPORTTIME's lines on its
    stderr (the program's sys.modules cannot tell: Portal takes its own modules
    out of it before the program runs)."""
    names = set()
    for line in stderr.decode().splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                names.add(name)
    return names


def test_start_up_imports_nothing_a_quiet_run_does_not_need(portal_run, tmp_path):
    script = tmp_path / "hello.py"
    script.write_text("print('hello')\n")
    env = base_env({"PORTAL_HOME": str(tmp_path / "home"), "PYTHONPROFILEIMPORTTIME": "1"})
    python = subprocess.run([PYTHON, str(script)], env=env, capture_output=True,
                            timeout=RUN_TIMEOUT, check=True)
    for attempt in ("instruments and caches the script", "uses the cached code"):
        proc = subprocess.run([portal_run, str(script)], env=env, capture_output=True,
                              timeout=RUN_TIMEOUT)
        assert proc.returncode == 0 and proc.stdout == b"hello\n", proc.stderr.decode()
    extra = imported(proc.stderr) - imported(python.stderr)
    assert "_portal.run.runtime" in extra, "no import of Portal's runtime seen: not run by it?"
    paid = sorted(extra & set(LAZY_MODULES))
    assert not paid, f"start-up with the cached code imported {paid}"
