"""Attacks on the processes of a job and on Portal's command line (issue 10, items 3,
6 and the signal part of 7; docs/security.md, "One job, one process" and "Options"):

- SIGKILL of a job's supervisor (`portal resume`, portal-run) must never let a second
  process run the job beside the first: the interpreter dies with its supervisor, and
  the job's lock is held for as long as any process of the job runs, so a second
  `portal resume`, `rm` or `gc` is refused meanwhile (20 tries each);
- the program's own children (forked workers, subprocesses) never keep a job locked;
- every bad `--mem` value is refused the same way by portal-run and `portal resume`
  (exit 2, one `portal: --mem VALUE: problem` line, no segfault, no traceback, never
  a silent "no cap"), and no command prints CLI11's own text;
- a program that dies of a signal makes portal-run die of the same one (what a
  parent sees in os.waitpid is python's).
"""
import json
import os
import re
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import PYTHON, RUN_TIMEOUT, read_until, store_env

PORTAL_RUN = os.environ.get("PORTAL_RUN") or shutil.which("portal-run")
PORTAL = os.environ.get("PORTAL") or str(Path(PORTAL_RUN).with_name("portal"))
TRIES = 20
GONE_WITHIN = 5.0  # seconds for a SIGKILLed supervisor's interpreter to be gone
SECOND_RUN_TIMEOUT = 30  # a second run that does not end ran the job beside the first

# The job's program: at iteration 1 a fake out-of-memory error suspends it (first
# run only: the fixture's count is part of the job); at iteration 2 it notes its pid
# and then runs until killed.  With "outlive" it first clears the parent-death
# signal Portal set, as a program may (the race of a supervisor killed before its
# interpreter is gone, made to last).
HELD = """\
import os, sys, time
for i in range(3):
    if i == 1:
        pass
    if i == 2:
        if len(sys.argv) > 2 and sys.argv[2] == "outlive":
            import ctypes
            PR_SET_PDEATHSIG = 1
            ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, 0)
        with open(sys.argv[1], "a") as f:
            f.write(f"{os.getpid()}\\n")
        print("held", flush=True)
        while True:
            time.sleep(0.05)
"""
SUSPEND_AT = 4  # `pass`, in iteration 1


@pytest.fixture
def work(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "held.py").write_text(HELD)
    return work


def env_of(work, **extra):
    return store_env(work.parent / "home", **extra)


def run(cmd, work, timeout=RUN_TIMEOUT, **extra):
    return subprocess.run(cmd, cwd=work, capture_output=True, env=env_of(work, **extra), timeout=timeout)


def pids_in(path):
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def gone(pid):
    """Not running any more: absent, or a zombie nobody has reaped yet."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


def wait_gone(pid, within):
    deadline = time.monotonic() + within
    while not gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def state_of(work, job):
    shown = run([PORTAL, "show", job, "--json"], work)
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)["state"]


def suspend(work, pids, *mode):
    """A job of held.py, suspended at iteration 1; its id."""
    spec = f"{work / 'held.py'}:{SUSPEND_AT}"
    r = run([PORTAL_RUN, "held.py", str(pids), *mode], work, PORTAL_FAKE_OOM=spec)
    assert r.returncode == 75, r.stderr
    return re.search(rb"portal resume (\S+)", r.stderr).group(1).decode()


def start(cmd, work, pids):
    """Start a run of the job that holds (iteration 2); the process and the
    program's pid."""
    before = len(pids_in(pids))
    proc = subprocess.Popen(cmd, cwd=work, env=env_of(work), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # The whole line: under PYTHONUNBUFFERED print() writes "held" and "\n" apart,
        # and a supervisor killed between them leaves the program a broken pipe, of
        # which it dies (as it would under python) before the test has looked.
        read_until(proc.stdout.fileno(), b"held\n", time.monotonic() + RUN_TIMEOUT, " ".join(cmd))
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    held = pids_in(pids)
    assert len(held) == before + 1, held
    return proc, held[-1]


def kill_and_reap(proc):
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=RUN_TIMEOUT)
    proc.stdout.close()
    proc.stderr.close()


# --- one job, one process ----------------------------------------------------------------

def test_supervisor_sigkill_then_a_second_resume_never_runs_the_job_beside_the_first(work):
    """SIGKILL of `portal resume`'s supervisor, then at once a second `portal resume`
    of the job: refused while the first interpreter lives (it still holds the lock,
    naming its holder); once that interpreter is gone the job is suspended again at
    its checkpoint, intact (no sound checkpoint is orphaned), and the second resume
    runs it - never beside the first: the first interpreter is gone by the time the
    second program starts, and shortly after its supervisor."""
    pids = work / "pids"
    named_the_holder = resumed = 0
    for attempt in range(TRIES):
        job = suspend(work, pids)
        proc, program = start([PORTAL, "resume", job], work, pids)
        ran = len(pids_in(pids))   # the programs run so far, the first resume's included
        kill_and_reap(proc)
        second = subprocess.Popen([PORTAL, "resume", job], cwd=work, env=env_of(work), stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out = b""
            deadline = time.monotonic() + SECOND_RUN_TIMEOUT
            while b"held\n" not in out and second.poll() is None and time.monotonic() < deadline:
                if select.select([second.stdout], [], [], 0.05)[0]:
                    out += os.read(second.stdout.fileno(), 4096)
            if b"held\n" in out:
                # It runs the job: the first program was gone before it started.
                resumed += 1
                held = pids_in(pids)
                assert gone(program) and len(held) == ran + 1 and held[-2] == program, \
                    f"try {attempt}: the job's program ran beside the first: {held}"
                second.kill()
                second.wait(timeout=RUN_TIMEOUT)
                assert wait_gone(held[-1], GONE_WITHIN)
            else:
                _, err = second.communicate(timeout=SECOND_RUN_TIMEOUT)
                assert second.returncode == 1 and out == b"", (attempt, second.returncode, out, err)
                err = err.decode()
                assert err.startswith("portal: resume: job ") and err.count("\n") == 1, (attempt, err)
                holder = f"program pid {program}"
                assert (f"is running (pid {proc.pid}, portal resume {job}, since " in err and holder in err) \
                    or f"is in use by pid {proc.pid}" in err, (attempt, err)
                named_the_holder += holder in err
                assert pids_in(pids).count(program) == 1 and len(pids_in(pids)) == ran, \
                    f"try {attempt}: the job's program ran twice: {pids_in(pids)}"
        finally:
            if second.poll() is None:
                second.kill()
                second.wait()
            second.stdout.close()
            second.stderr.close()
        assert wait_gone(program, GONE_WITHIN), \
            f"try {attempt}: the interpreter {program} outlived its SIGKILLed supervisor"
        deadline = time.monotonic() + GONE_WITHIN
        while state_of(work, job) != "suspended":   # its checkpoint, intact: resumable again
            assert time.monotonic() < deadline, state_of(work, job)
            time.sleep(0.02)
    print(f"{named_the_holder} of {TRIES} second resumes came while the dying interpreter held the lock, "
          f"{resumed} once it was gone")


def test_the_lock_holds_while_the_program_outlives_its_supervisor(work):
    """A program that outlives its SIGKILLed supervisor (here it cleared its
    parent-death signal) keeps its job locked: `portal resume`, `rm` and `gc` are
    refused or leave it alone, naming the program's pid, 20 times; once it is gone,
    the job is suspended again at its checkpoint, and can be removed."""
    pids = work / "pids"
    job = suspend(work, pids, "outlive")
    proc, program = start([PORTAL, "resume", job], work, pids)
    try:
        kill_and_reap(proc)
        job_dir = work.parent / "home" / "jobs" / job
        for attempt in range(TRIES):
            resumed = run([PORTAL, "resume", job], work, timeout=SECOND_RUN_TIMEOUT)
            assert resumed.returncode == 1 and resumed.stdout == b"", resumed
            assert not gone(program), (attempt, f"the program {program} died", resumed.stderr)
            assert f"job {job} is running (pid {proc.pid}, portal resume {job}, since ".encode() \
                in resumed.stderr and f"; program pid {program}): one process runs a job at a time" \
                .encode() in resumed.stderr, resumed.stderr
            removed = run([PORTAL, "rm", job], work)
            assert removed.returncode == 1, removed
            assert removed.stderr.startswith(f"portal: rm: job {job} is in use by pid {proc.pid}, ".encode()) \
                and f"; program pid {program}: stop that process first".encode() in removed.stderr, \
                removed.stderr
            # A job nobody held would be "lost", which gc --older-than 0 removes.
            collected = run([PORTAL, "gc", "--older-than", "0"], work)
            assert collected.returncode == 0, collected.stderr
            assert (job_dir / "job.json").exists() and (job_dir / "checkpoint").exists(), attempt
            assert not gone(program)
        assert state_of(work, job) == "running"
        assert pids_in(pids) == [program]
    finally:
        os.kill(program, signal.SIGKILL)
    assert wait_gone(program, GONE_WITHIN)
    deadline = time.monotonic() + GONE_WITHIN
    while state_of(work, job) != "suspended":   # recovered: its checkpoint is intact
        assert time.monotonic() < deadline, "the lock outlived the program"
        time.sleep(0.05)
    removed = run([PORTAL, "rm", job], work)
    assert removed.returncode == 0, removed.stderr


def test_the_interpreter_dies_with_portal_run(work):
    """SIGKILL of portal-run itself ends the program (as SIGKILL of python would):
    no orphan keeps running, and the job is then lost, not locked."""
    pids = work / "pids"
    proc, program = start([PORTAL_RUN, "held.py", str(pids)], work, pids)
    kill_and_reap(proc)
    assert wait_gone(program, GONE_WITHIN), f"the interpreter {program} outlived portal-run"
    listed = json.loads(run([PORTAL, "list", "--json"], work).stdout)
    assert [j["state"] for j in listed] == ["lost"], listed


FORKS = """\
import os, subprocess, sys, time
worker = os.fork()
if worker == 0:            # a forked worker (multiprocessing, DataLoader): outlives the job
    time.sleep(60)
    os._exit(0)
helper = subprocess.Popen(["sleep", "60"], close_fds=False)  # even without close_fds
with open(sys.argv[1], "w") as f:
    f.write(f"{worker} {helper.pid}\\n")
print("children started", flush=True)
"""


def test_the_programs_children_do_not_keep_the_job_locked(work):
    """The lock is the job's, not its descendants': once the interpreter has ended,
    a forked child or a subprocess it left running holds no descriptor of job.lock,
    and the job can be removed."""
    (work / "forks.py").write_text(FORKS)
    done = run([PORTAL_RUN, "forks.py", "children"], work)
    children = [int(p) for p in (work / "children").read_text().split()]
    try:
        assert done.returncode == 0 and done.stdout == b"children started\n", done
        job = json.loads(run([PORTAL, "list", "--json"], work).stdout)[0]["id"]
        lock = work.parent / "home" / "jobs" / job / "job.lock"
        for child in children:
            assert not gone(child), "the test needs the children still running"
            held = [os.readlink(f"/proc/{child}/fd/{fd}") for fd in os.listdir(f"/proc/{child}/fd")]
            assert str(lock) not in held, (child, held)
        assert state_of(work, job) == "completed"
        removed = run([PORTAL, "rm", job], work)
        assert removed.returncode == 0, removed.stderr
    finally:
        for child in children:
            os.kill(child, signal.SIGKILL)


# --- options -------------------------------------------------------------------------------

BELOW = "below the 256 MiB Portal needs to start python"
NOT_A_SIZE = "not a size (examples: 64 for 64 GiB, 512M, 2G, 1.5T)"
MEM_VALUES = {
    "1K": BELOW, "1M": BELOW, "10M": BELOW, "0.000000000001": BELOW, "255M": BELOW,
    "0": "no memory at all",
    "9000000000": "this machine has ", "100000": "this machine has ",
    "1e400": NOT_A_SIZE, "-1": NOT_A_SIZE, "nan": NOT_A_SIZE, "inf": NOT_A_SIZE, "10Q": NOT_A_SIZE,
    "8 G": NOT_A_SIZE,
}
CLI11_WORDS = [b"not in range", b"Could not convert", b"The following argument", b"is required",
               b"required but received", b"1797693", b"Value ", b"Path does not exist", b"not in {",
               b"Traceback", b"Segmentation", b"ValidationError"]


def assert_portal_usage_line(result, starts):
    assert result.returncode == 2 and result.stdout == b"", result
    err = result.stderr
    assert err.startswith(starts) and err.endswith(b"\n") and err.count(b"\n") == 1, err
    for words in CLI11_WORDS:
        assert words not in err, err


@pytest.fixture
def suspended(work):
    return suspend(work, work / "pids")


@pytest.mark.parametrize("value", list(MEM_VALUES), ids=lambda v: repr(v))
def test_a_bad_mem_is_refused_alike_by_both_commands(work, suspended, value):
    """The same value gives the same exit status (2) and the same problem on
    portal-run (`--mem V` and `--mem=V`) and `portal resume`; nothing runs, the job
    stays suspended."""
    problems = []
    for cmd in ([PORTAL_RUN, "--mem", value, "-c", "print('ran')"],
                [PORTAL_RUN, f"--mem={value}", "-c", "print('ran')"],
                [PORTAL, "resume", suspended, "--mem", value]):
        result = run(cmd, work)
        assert_portal_usage_line(result, f"portal: --mem {value}: {MEM_VALUES[value]}".encode())
        problems.append(result.stderr.split(b";")[0].split(b" (see ")[0])
    assert len(set(problems)) == 1, problems
    if MEM_VALUES[value] == "this machine has ":
        assert re.search(rb"this machine has \d+\.\d [GMT]iB of memory, less than the ", problems[0])
    assert state_of(work, suspended) == "suspended"


def test_a_mem_the_machine_has_runs_capped(work):
    """The floor itself and the machine's memory are accepted: the program runs."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for value in ("256M", "0.25", f"{max(total // 2**30 - 1, 1)}G"):
        result = run([PORTAL_RUN, "--mem", value, "-c", "print('ran')"], work)
        assert (result.returncode, result.stdout, result.stderr) == (0, b"ran\n", b""), (value, result)


@pytest.mark.parametrize("cmd,starts", [
    (["run", "--no-such-option", "x.py"], b"portal: --no-such-option: not an option of this command"),
    (["run", "--user-code", "/nonexistent", "x.py"], b"portal: --user-code /nonexistent: no such file"),
    (["run", "--mem"], b"portal: --mem: needs a value (SIZE)"),
    (["logs", "x", "--run", "0"], b"portal: --run 0: not a whole number from 1 up"),
    (["logs", "x", "--run", "99999999999"], b"portal: --run 99999999999: not a whole number from 1 up"),
    (["gc", "--older-than", "-1"], b"portal: --older-than -1: not a number of days"),
    (["gc", "--older-than", "nan"], b"portal: --older-than nan: not a number of days"),
    (["list", "--state", "bogus"], b"portal: --state bogus: not one of running, suspended"),
    (["list", "extra"], b"portal: extra: not expected here"),
    (["resume"], b"portal: JOB: missing"),
    (["resume", "x", "--device-map", "1-2"], b"portal: --device-map 1-2: not FROM:TO"),
    (["bogus"], b"portal: command: missing or unknown"),
], ids=lambda c: " ".join(c) if isinstance(c, list) else None)
def test_no_command_prints_cli11s_own_words(work, cmd, starts):
    for program in ([PORTAL] + cmd, [PORTAL_RUN] + cmd[1:]) if cmd[0] == "run" else ([PORTAL] + cmd,):
        assert_portal_usage_line(run(program, work), starts)


# --- deaths by signal ------------------------------------------------------------------------

DEATHS = {
    "keyboard_interrupt": "raise KeyboardInterrupt",  # python re-raises SIGINT on itself
    "sigterm": "import os, signal; os.kill(os.getpid(), signal.SIGTERM)",
    "abort": "import os; os.abort()",
    "sigsegv": "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)",
    "sigkill": "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
}


def wait_status(cmd, cwd, env):
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.stdout.read(), proc.stderr.read()
    _, status = os.waitpid(proc.pid, 0)
    proc.returncode = 0  # reaped here, not by Popen
    proc.stdout.close()
    proc.stderr.close()
    return status, out, err


@pytest.mark.parametrize("death", list(DEATHS))
def test_portal_run_dies_of_the_signal_python_dies_of(work, death):
    """The raw os.waitpid status of portal-run is python's: killed by the same
    signal, no core dump flag (no core of portal-run's own in the directory)."""
    env = env_of(work)
    python = wait_status([PYTHON, "-c", DEATHS[death]], work, env)
    portal = wait_status([PORTAL_RUN, "-c", DEATHS[death]], work, env)
    assert os.WIFSIGNALED(python[0]), python
    assert portal[0] == python[0], (f"python3: {os.WTERMSIG(python[0])}, portal-run: "
                                    f"{portal[0]:#x}", portal[2])
    assert portal[1] == python[1]
    assert portal[2].startswith(python[2])  # plus `portal: killed: ...` for some
    assert not [p for p in work.iterdir() if p.name.startswith("core")]


def test_a_shell_still_shows_130_after_a_keyboard_interrupt(work):
    shown = subprocess.run(["sh", "-c", f"{PORTAL_RUN} -c 'raise KeyboardInterrupt' 2>/dev/null; echo $?"],
                           cwd=work, env=env_of(work), capture_output=True, timeout=RUN_TIMEOUT)
    assert shown.stdout == b"130\n"


SHOW_PORTAL_STATE = ("import os\n"
                     "print(sorted(k for k in os.environ if k.startswith('PORTAL_')))\n"
                     "fds = sorted(int(fd) for fd in os.listdir('/proc/self/fd'))\n"
                     "print([(fd, os.get_inheritable(fd), os.path.basename(os.readlink(f'/proc/self/fd/{fd}')))\n"
                     "       for fd in fds if fd > 3])\n")


@pytest.mark.parametrize("kind", ["script", "directory"])
def test_the_program_sees_no_lock_of_portals_but_its_descriptor(work, kind):
    """The name of the interpreter's descriptor of the lock is Portal's: the program
    sees python's environment.  It does see the descriptor itself (a process holds
    a lock only through one): one more, at 100 or above, close-on-exec.  For a
    directory, which python runs without Portal's bootstrap, nothing is handed over."""
    if kind == "script":
        (work / "show.py").write_text(SHOW_PORTAL_STATE)
        target = "show.py"
    else:
        (work / "app").mkdir()
        (work / "app" / "__main__.py").write_text(SHOW_PORTAL_STATE)
        target = "app"
    python = run([PYTHON, target], work)
    portal = run([PORTAL_RUN, target], work)
    assert (portal.returncode, portal.stderr) == (0, b""), portal
    env_python, fds_python = python.stdout.splitlines()
    env_portal, fds_portal = portal.stdout.splitlines()
    assert env_portal == env_python and b"PORTAL_LOCK_FD" not in env_portal
    if kind == "directory":
        assert fds_portal == fds_python
    else:
        assert fds_python == b"[]"
        assert re.fullmatch(rb"\[\((\d+), False, 'job.lock'\)\]", fds_portal), fds_portal
        assert int(re.search(rb"\d+", fds_portal).group()) >= 100
