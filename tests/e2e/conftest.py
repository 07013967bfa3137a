"""Shared helpers of the end-to-end tests: find portal-run, lay out a fresh copy of
the corpus, run a program under /usr/bin/python3 and under portal-run in the same
conditions, and compare what came out.

The suite runs under Debian's /usr/bin/python3 (CTest starts it so); `portal-run`
is taken from $PORTAL_RUN, else from PATH.  The interpreter portal-run runs
programs in is $PORTAL_PYTHON (CTest passes the one the build was configured
with; a lane for another interpreter passes its own), /usr/bin/python3 when
unset: set here in the suite's own environment, so that every run of portal-run
inherits it and none falls to the first python3 on PATH (docs/interpreters.md).
"""
import dataclasses
import difflib
import functools
import os
import resource
import select
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import pytest

PYTHON = os.environ.setdefault("PORTAL_PYTHON", "/usr/bin/python3")

# The running user's own job store is never written by the suite: every program the
# suite runs gets a store of the session's own (base_env, and os.environ for the
# runs that take the suite's environment as it is), removed at the end, and the
# session fails if the user's store changed while it ran (pytest_sessionfinish).
USER_STORE = Path(os.path.abspath(os.environ.get("PORTAL_HOME")
                                  or os.path.join(os.path.expanduser("~"), ".portal")))
SUITE_HOME = tempfile.mkdtemp(prefix="portal-e2e-home-")
os.environ["PORTAL_HOME"] = SUITE_HOME
CORPUS = Path(__file__).resolve().parent / "compat"
RUN_TIMEOUT = 60  # seconds for one program run; a hang fails the test, never the suite
READY = b"ready"


def find_portal_run() -> str:
    path = os.environ.get("PORTAL_RUN") or shutil.which("portal-run")
    if not path:
        raise pytest.UsageError("portal-run not found: set PORTAL_RUN to its path "
                                "(CTest does) or put it on PATH")
    path = os.path.abspath(path)
    if not os.access(path, os.X_OK):
        raise pytest.UsageError(f"PORTAL_RUN={path} is not an executable")
    return path


@pytest.fixture(scope="session")
def portal_run() -> str:
    return find_portal_run()


@pytest.fixture(scope="session")
def portal_cli(portal_run) -> str:
    """The `portal` command installed or built next to portal-run."""
    path = os.path.join(os.path.dirname(os.path.realpath(portal_run)), "portal")
    assert os.access(path, os.X_OK), f"no `portal` executable next to {portal_run}"
    return path


def base_env(overrides: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The environment of every run: the caller's, without anything that would make
    python or Portal behave differently from one machine to the next."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "PORTAL_")) and k != "PYTEST_CURRENT_TEST"}
    env["LC_ALL"] = "C.UTF-8"
    env["PORTAL_PYTHON"] = PYTHON  # the interpreter under test, never PATH's python3
    env["PORTAL_HOME"] = SUITE_HOME  # never the running user's own store
    env.update(overrides or {})
    return env


def _store_snapshot(path: Path) -> Optional[Dict[str, Tuple[int, int, int]]]:
    """Every entry under a job store, with its type, size and modification time;
    None when there is no store."""
    if not os.path.lexists(path):
        return None
    entries = {".": (os.lstat(path).st_mode, 0, 0)}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            entry = os.path.join(dirpath, name)
            try:
                st = os.lstat(entry)
            except OSError:
                continue
            entries[os.path.relpath(entry, path)] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns)
    return entries


_USER_STORE_BEFORE = _store_snapshot(USER_STORE)


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(SUITE_HOME, ignore_errors=True)
    after = _store_snapshot(USER_STORE)
    if after == _USER_STORE_BEFORE:
        return
    before = _USER_STORE_BEFORE or {}
    changed = sorted(k for k in set(before) | set(after or {}) if before.get(k) != (after or {}).get(k))
    shown = ", ".join(changed[:10]) + (f" and {len(changed) - 10} more" if len(changed) > 10 else "")
    message = (f"the suite changed the running user's own job store {USER_STORE} "
               f"({'created it' if _USER_STORE_BEFORE is None else 'changed: ' + shown}): a test "
               f"ran Portal with that store instead of the suite's PORTAL_HOME (conftest.base_env)")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_line(f"FAILED {message}", red=True)
    else:
        print(f"FAILED {message}")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def store_env(home, **extra) -> Dict[str, str]:
    """The caller's environment with the job store at `home`, and none of the
    Portal settings a developer's shell may carry (a policy, a fake OOM)."""
    env = dict(os.environ, PORTAL_HOME=str(home))
    for name in ("PORTAL_POLICY", "PORTAL_FAKE_OOM"):
        env.pop(name, None)
    env.update(extra)
    return env


# A program killed by SIGQUIT would dump core into the corpus copy: not for
# us (the soft limit is inherited by every program run; no preexec_fn, which is
# unsafe with the threads that run cases ahead).
resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))


@dataclasses.dataclass
class Outcome:
    stdout: bytes
    stderr: Optional[bytes]  # None when stderr went into stdout
    returncode: int


def fresh_corpus(workdir: Path, setup: Optional[Callable[[Path], None]] = None) -> Path:
    """A pristine copy of the corpus at workdir/compat, the same path for both runs
    of a case (tracebacks and __file__ embed it), with nothing left by an earlier run
    (__pycache__ written by the first interpreter must not change the second run)."""
    root = workdir / "compat"
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(CORPUS, root, symlinks=True)
    if setup is not None:
        setup(root)
    return root


# --- facts of the interpreter under test -----------------------------------------
# The suite's own interpreter (the one running pytest) need not be PYTHON: what a
# test expects of the library code a program runs is asked of PYTHON itself.

_ORIGIN_OF = ("import importlib.util, sys\n"
              "spec = importlib.util.find_spec(sys.argv[1])\n"
              "print(spec.origin if spec is not None and spec.origin else '')")


def origin_of(module: str) -> Optional[Path]:
    """The file PYTHON loads `module` from; None when it has no such module."""
    r = subprocess.run([PYTHON, "-c", _ORIGIN_OF, module], capture_output=True, text=True,
                       env=base_env(), timeout=RUN_TIMEOUT)
    return Path(r.stdout.strip()) if r.returncode == 0 and r.stdout.strip() else None


@functools.lru_cache(maxsize=None)
def cache_tag() -> str:
    """PYTHON's sys.implementation.cache_tag, the tag of its .pyc names (cpython-313)."""
    r = subprocess.run([PYTHON, "-c", "import sys; print(sys.implementation.cache_tag)"],
                       capture_output=True, text=True, env=base_env(), timeout=RUN_TIMEOUT, check=True)
    return r.stdout.strip()


@functools.lru_cache(maxsize=None)
def python_version() -> str:
    """PYTHON's version, `3.13.5` (the suite's own interpreter may be another)."""
    r = subprocess.run([PYTHON, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                       capture_output=True, text=True, env=base_env(), timeout=RUN_TIMEOUT, check=True)
    return r.stdout.strip()


_TORCH_OOM = ("import torch\n"
              "oom = getattr(torch, 'OutOfMemoryError', None) or torch.cuda.OutOfMemoryError\n"
              "print(oom.__module__ + '.' + oom.__qualname__)")


@functools.lru_cache(maxsize=None)
def torch_oom_name() -> str:
    """How a traceback under PYTHON names torch's out-of-memory error (the fixture's
    `torch` kind): torch.OutOfMemoryError in torch 2.x, torch.cuda.OutOfMemoryError
    in torch 1.13."""
    r = subprocess.run([PYTHON, "-c", _TORCH_OOM], capture_output=True, text=True,
                       env=base_env(), timeout=RUN_TIMEOUT)
    assert r.returncode == 0, f"torch's OutOfMemoryError under {PYTHON}: {r.stderr}"
    return r.stdout.strip().splitlines()[-1]


def line_in_function(path: Path, header: str, statement: str) -> int:
    """The 1-based line of the first line that is `statement` after the line that
    starts with `header` (`def step(`) in the file `path`: where a library's
    function starts, in whichever version of the library PYTHON has."""
    lines = [line.strip() for line in path.read_text().splitlines()]
    start = next((i for i, line in enumerate(lines) if line.startswith(header)), None)
    assert start is not None, f"no {header!r} in {path}"
    found = next((i for i in range(start + 1, len(lines)) if lines[i] == statement), None)
    assert found is not None, f"no {statement!r} after {header!r} in {path}"
    return found + 1


def sgd_step_start() -> Tuple[Path, int]:
    """torch.optim.SGD.step's file under PYTHON and the line of its first statement,
    `loss = None` (127 in torch 1.13, 111 in torch 2.6); skips where PYTHON has no torch."""
    sgd = origin_of("torch.optim.sgd")
    if sgd is None:
        pytest.skip(f"torch is not installed for {PYTHON}: the optimizer step is torch's")
    return sgd, line_in_function(sgd, "def step(", "loss = None")


# --- waiting for a program to be where a signal is expected -------------------------

def read_until(fd: int, marker: bytes, deadline: float, what: str) -> bytes:
    """Read from fd until `marker` has arrived; returns everything read."""
    data = b""
    while marker not in data:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{what}: no {marker!r} marker in time; got {data!r}")
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: a pty whose other end is closed
            chunk = b""
        if not chunk:
            raise AssertionError(f"{what}: output ended before {marker!r}; got {data!r}")
        data += chunk
    return data


def _stat_fields(pid: int) -> List[str]:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()  # [state, ppid, ...]


def interpreter_pid(pid: int, deadline: float) -> int:
    """`pid` if it runs /usr/bin/python3 itself, else its child that does (portal-run's)."""
    while True:
        if os.path.realpath(f"/proc/{pid}/exe") == os.path.realpath(PYTHON):
            return pid
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if int(_stat_fields(int(entry))[1]) == pid:
                        return int(entry)
                except (OSError, IndexError):
                    continue
        if time.monotonic() > deadline:
            raise AssertionError(f"no interpreter process under pid {pid}")
        time.sleep(0.005)


def wait_until_sleeping(pid: int, deadline: float):
    """Wait until the interpreter's main thread blocks (in the corpus's long
    time.sleep after printing the ready marker, or reading its input).  A signal that arrived while it is
    still returning from print() would be raised at the print line instead: the
    traceback would then differ from run to run."""
    while _stat_fields(pid)[0] != "S":
        if time.monotonic() > deadline:
            raise AssertionError(f"pid {pid} never blocked after printing its ready marker")
        time.sleep(0.001)


# --- running -----------------------------------------------------------------------

def run_program(cmd: List[str], cwd: Path, env: Dict[str, str], stdin: bytes = b"",
                merged: bool = False, send_signal: int = 0) -> Outcome:
    """Run `cmd` with stdin fed from `stdin`, stdout and stderr on separate pipes or
    (merged) on one.  With `send_signal`, wait for the ready marker on stdout and for
    the interpreter to block, then send that signal to the started process itself
    (portal-run's own pid under Portal)."""
    if not send_signal:
        proc = subprocess.run(cmd, cwd=cwd, env=env, input=stdin, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT if merged else subprocess.PIPE,
                              timeout=RUN_TIMEOUT)
        return Outcome(proc.stdout, None if merged else proc.stderr, proc.returncode)

    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merged else subprocess.PIPE)
    try:
        proc.stdin.write(stdin)
        proc.stdin.close()
        proc.stdin = None
        deadline = time.monotonic() + RUN_TIMEOUT
        head = read_until(proc.stdout.fileno(), READY, deadline, " ".join(cmd))
        wait_until_sleeping(interpreter_pid(proc.pid, deadline), deadline)
        os.kill(proc.pid, send_signal)
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return Outcome(head + out, err, proc.returncode)


QUIET_SECONDS = 0.1  # no output for this long: whatever was on its way has arrived


def drain_quiet(fd: int, quiet: float) -> bytes:
    """Read what fd has until it has been silent for `quiet` seconds."""
    data = b""
    while select.select([fd], [], [], quiet)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    return data


def run_in_terminal(cmd: List[str], cwd: Path, env: Dict[str, str],
                    keystrokes: List[tuple]) -> Outcome:
    """Run `cmd` as the session leader of a new pseudo-terminal that is its
    controlling terminal, stdin, stdout and stderr all on it, as in an interactive
    shell.  keystrokes: (marker, bytes) pairs: once `marker` has appeared in the
    output and the interpreter blocks, the bytes are typed."""
    master, slave = os.openpty()
    try:
        # setsid --ctty: a new session whose controlling terminal is its stdin, the
        # pty (util-linux; it execs in place, so the pid stays the program's).
        proc = subprocess.Popen(["setsid", "--ctty"] + cmd, cwd=cwd, env=dict(env, TERM="dumb"),
                                stdin=slave, stdout=slave, stderr=slave)
    finally:
        os.close(slave)
    output = b""
    deadline = time.monotonic() + RUN_TIMEOUT
    try:
        for marker, keys in keystrokes:
            while marker not in output:
                output += read_until(master, marker, deadline, " ".join(cmd))
            # Blocked (sleeping, or reading the terminal) before the keys arrive.
            wait_until_sleeping(interpreter_pid(proc.pid, deadline), deadline)
            # And what it wrote has reached us: a QUIT or INTR key flushes the
            # terminal's output queue, so a line end still in it (on its way through
            # portal-run's relay) would be lost, by the terminal, not by the program.
            output += drain_quiet(master, QUIET_SECONDS)
            os.write(master, keys)
        while True:  # until every process holding the terminal is gone (EIO)
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{cmd}: still running; output so far {output!r}")
            ready, _, _ = select.select([master], [], [], left)
            if not ready:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        proc.wait(timeout=RUN_TIMEOUT)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return Outcome(output, None, proc.returncode)


# --- comparing ---------------------------------------------------------------------

def _text_diff(name: str, expected: bytes, actual: bytes) -> str:
    lines = difflib.unified_diff(
        expected.decode("utf-8", "backslashreplace").splitlines(keepends=True),
        actual.decode("utf-8", "backslashreplace").splitlines(keepends=True),
        fromfile=f"{name} under python3", tofile=f"{name} under portal-run")
    return "".join(lines) or f"{name}: same text, different bytes: {expected!r} != {actual!r}"


def portal_status_for(python_returncode: int) -> int:
    """What portal-run must end with when python ends with `python_returncode`: the
    same, a death by the same signal included (-N: portal-run dies of signal N once
    the job is recorded, so a parent sees what python's would, and a shell 128+N)."""
    return python_returncode


def assert_same(python: Outcome, portal: Outcome):
    problems = []
    if portal.stdout != python.stdout:
        problems.append(_text_diff("stdout", python.stdout, portal.stdout))
    if portal.stderr != python.stderr:
        problems.append(_text_diff("stderr", python.stderr or b"", portal.stderr or b""))
    want = portal_status_for(python.returncode)
    if portal.returncode != want:
        problems.append(f"exit status: python3 {python.returncode}, so portal-run must give "
                        f"{want} (negative: killed by that signal); it gave {portal.returncode}")
    assert not problems, "portal-run differs from python3:\n" + "\n".join(problems)


@dataclasses.dataclass
class Comparison:
    python: Outcome
    portal: Outcome


def run_both(portal_run: str, workdir: Path, args: List[str], *, cwd: str = ".",
             stdin: bytes = b"", env: Optional[Dict[str, str]] = None,
             setup: Optional[Callable[[Path], None]] = None, merged: bool = False,
             send_signal: int = 0, terminal: Optional[List[tuple]] = None,
             prefix: Optional[List[str]] = None) -> Comparison:
    """Run `python3 ARGS` and `portal-run ARGS`, each in a fresh copy of the corpus at
    the same path, with the same cwd, stdin and environment (and both through the
    command `prefix`, if any, that execs them).  "{root}" in ARGS and in env's
    values stands for the corpus copy's absolute path.  assert_same() compares the
    two."""
    outcomes = []
    for launcher in (PYTHON, portal_run):
        root = fresh_corpus(workdir, setup)
        cmd = (prefix or []) + [launcher] + [a.replace("{root}", str(root)) for a in args]
        run_env = base_env({k: v.replace("{root}", str(root)) for k, v in (env or {}).items()})
        if terminal is not None:
            outcomes.append(run_in_terminal(cmd, root / cwd, run_env, terminal))
        else:
            outcomes.append(run_program(cmd, root / cwd, run_env, stdin, merged, send_signal))
    return Comparison(*outcomes)


@pytest.fixture
def workdir(tmp_path) -> Path:
    return tmp_path


# --- another user of the machine (the attack suite, test_security_*.py) ---------------

@dataclasses.dataclass
class User:
    name: str
    uid: int
    gid: int
    home: Path

    def run(self, cmd: List[str], **kwargs) -> subprocess.CompletedProcess:
        """Run cmd as this user (setpriv: no setuid helper, no PAM, no login shell)."""
        prefix = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--"]
        env = kwargs.pop("env", None) or base_env()
        env = dict(env, HOME=str(self.home), USER=self.name, LOGNAME=self.name)
        if env.get("PORTAL_HOME") == SUITE_HOME:
            # the session's store is the running user's: this user's own is in its home
            del env["PORTAL_HOME"]
        return subprocess.run(prefix + list(cmd), env=env, timeout=kwargs.pop("timeout", RUN_TIMEOUT),
                              **kwargs)


def _unprivileged_user(name: str) -> User:
    import pwd
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", "--user-group", name],
                       check=True, capture_output=True)
        entry = pwd.getpwnam(name)
    home = Path(entry.pw_dir)
    home.mkdir(mode=0o700, exist_ok=True)
    os.chown(home, entry.pw_uid, entry.pw_gid)
    os.chmod(home, 0o700)
    return User(name, entry.pw_uid, entry.pw_gid, home)


@pytest.fixture(scope="session")
def users():
    """Two unprivileged users of the machine, (victim, attacker), created when the
    suite runs as root (as CI does); a cross-user attack cannot be staged otherwise."""
    if os.geteuid() != 0:
        pytest.skip("cross-user attacks need two real users: run the suite as root, "
                    "which creates portal-victim and portal-attacker")
    victim, attacker = _unprivileged_user("portal-victim"), _unprivileged_user("portal-attacker")
    _assert_reachable_by(victim, os.environ.get("PORTAL_RUN") or shutil.which("portal-run"))
    return victim, attacker


def _assert_reachable_by(user: User, portal_run: Optional[str]) -> None:
    """The attacks run Portal as these users: a build they cannot reach (a clone
    under a 0700 directory such as `mktemp -d`'s) would fail every attack with
    "permission denied", which reads as a broken product.  Said plainly instead."""
    if not portal_run:
        return
    blocked = [str(d) for d in reversed(Path(portal_run).resolve().parents)
               if d.is_dir() and not d.stat().st_mode & stat.S_IXOTH]
    assert not blocked, (f"{portal_run} is not reachable by {user.name}: {blocked[0]} lets no other "
                         f"user enter it (mode {stat.S_IMODE(os.stat(blocked[0]).st_mode):o}); "
                         f"clone and build under a directory others may enter (chmod o+x), "
                         f"then run the attack suite again")


@pytest.fixture
def shared_dir(tmp_path):
    """A directory every user may enter (the suite's own tmp_path is root's, 0700):
    under /tmp, removed afterwards.  Sticky and world-writable, as /tmp itself."""
    import tempfile
    path = Path(tempfile.mkdtemp(prefix="portal-shared-", dir="/tmp"))
    os.chmod(path, 0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


# --- a single-node Slurm cluster (test_slurm.py; scripts/slurm-cluster.sh) ---------

SLURM_DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol")
SLURM_START_TIMEOUT = 120  # seconds; measured ready in ~1.2 s, the machine may be loaded


@dataclasses.dataclass
class SlurmCluster:
    base: Path
    conf: str

    def env(self, env: Dict[str, str]) -> Dict[str, str]:
        """`env` with the clients (sbatch, squeue, ...) pointed at this cluster."""
        return dict(env, SLURM_CONF=self.conf)


def _free_port_pair() -> int:
    """A port P with P and P+1 free on loopback (slurmctld, slurmd)."""
    import socket
    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            if port >= 65535:
                continue
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
        return port
    raise AssertionError("no two adjacent free ports on 127.0.0.1")


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """munged + slurmctld + slurmd on loopback for the whole session, stopped at
    its end whatever happened (the script's stop cancels the jobs and ends every
    process it started, slurmstepd and the jobs included)."""
    missing = [name for name in SLURM_DAEMONS if not shutil.which(name)]
    if missing:
        pytest.skip(f"no Slurm on this machine ({', '.join(missing)} not found): "
                    "scripts/setup.sh installs slurmctld slurmd slurm-client munge")
    script = Path(__file__).resolve().parents[2] / "scripts" / "slurm-cluster.sh"
    base = Path(tempfile.mkdtemp(prefix="portal-slurm-"))  # short: munge's socket path has a limit
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env["SLURM_PORT"] = str(_free_port_pair())
    try:
        started = subprocess.run(["bash", str(script), "start", str(base)], env=env, capture_output=True,
                                 timeout=SLURM_START_TIMEOUT)
        assert started.returncode == 0, f"slurm-cluster.sh start failed: {started.stderr.decode()}"
        yield SlurmCluster(base, str(base / "etc" / "slurm.conf"))
    finally:
        subprocess.run(["bash", str(script), "stop", str(base)], env=env, capture_output=True,
                       timeout=SLURM_START_TIMEOUT)
        shutil.rmtree(base, ignore_errors=True)
