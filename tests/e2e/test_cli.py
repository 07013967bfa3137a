"""The `portal` commands over real jobs (docs/cli.md): list, show, logs, rm, gc,
inspect, and expiry, in a job store under a temporary PORTAL_HOME.

The jobs are small programs written by the tests and run under portal-run: one
suspended by PORTAL_FAKE_OOM in its loop (docs/architecture.md, "The fake-OOM fixture") and resumed with `portal
resume` in a new process, one that completes, one that fails.  Each command is
checked for what it prints, its exit status (0 done, 1 refused, 2 usage) and what
it leaves in the store; the resumed job's output, as `portal logs` gives it back,
is python's own."""
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import PYTHON, RUN_TIMEOUT, base_env

PORTAL_RUN = os.environ.get("PORTAL_RUN")
PORTAL = os.environ.get("PORTAL") or (PORTAL_RUN and str(Path(PORTAL_RUN).with_name("portal")))
SUSPENDED = 75

LOOP = """\
total = 0
for i in range(6):
    total += i
    print("i", i, total, flush=True)
print("total", total)
"""
LOOP_OOM = "/loop.py:3@3"   # `total += i` the 3rd time: iteration 2 (0-based) runs again
OK = 'print("hello")\n'
FAIL = 'print("before", flush=True)\nraise SystemExit(3)\n'
# Waits on stdin: it runs until the test closes it.
WAIT = 'import sys\nprint("ready", flush=True)\nsys.stdin.read()\nprint("done")\n'


class Store:
    """A job store and a directory of programs; runs portal and portal-run there."""

    def __init__(self, root: Path):
        self.home = root / "home"
        self.work = root / "work"
        self.work.mkdir()
        for name, text in {"loop.py": LOOP, "ok.py": OK, "fail.py": FAIL, "wait.py": WAIT}.items():
            (self.work / name).write_text(text)

    def env(self, **extra):
        return base_env({"PORTAL_HOME": str(self.home), **extra})

    def run_job(self, script, *, fake=None, expect):
        """portal-run SCRIPT, stdout and stderr on one pipe (their order is kept in
        the log too); returns (job id, combined output)."""
        env = self.env(**({"PORTAL_FAKE_OOM": fake} if fake else {}))
        before = set(self.ids())
        p = subprocess.run([PORTAL_RUN, script], cwd=self.work, env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT)
        assert p.returncode == expect, p.stdout
        (job,) = set(self.ids()) - before
        return job, p.stdout

    def portal(self, *args, expect=0, cwd=None):
        p = subprocess.run([PORTAL, *args], cwd=cwd or self.home.parent, env=self.env(),
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=RUN_TIMEOUT)
        assert p.returncode == expect, (args, p.returncode, p.stdout, p.stderr)
        return p

    def ids(self):
        jobs = self.home / "jobs"
        return sorted(p.name for p in jobs.iterdir()) if jobs.exists() else []

    def record(self, job):
        return json.loads((self.home / "jobs" / job / "job.json").read_text())

    def edit_record(self, job, **fields):
        path = self.home / "jobs" / job / "job.json"
        record = json.loads(path.read_text())
        record.update(fields)
        path.write_text(json.dumps(record))

    def listed(self):
        return {j["id"]: j for j in json.loads(self.portal("list", "--json").stdout)}


def python_output(store, script):
    return subprocess.run([PYTHON, script], cwd=store.work, env=base_env(), stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT).stdout


def without_reports(text: bytes) -> bytes:
    return b"".join(l for l in text.splitlines(keepends=True) if not l.startswith(b"portal: "))


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path)


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    """A store with a suspended, a completed and a failed job, made a second apart
    (newest first is by creation time), read but not changed by the tests."""
    s = Store(tmp_path_factory.mktemp("three"))
    s.suspended, s.suspended_out = s.run_job("loop.py", fake=LOOP_OOM, expect=SUSPENDED)
    time.sleep(1.1)
    s.completed, _ = s.run_job("ok.py", expect=0)
    time.sleep(1.1)
    s.failed, _ = s.run_job("fail.py", expect=3)
    return s


# --- list ------------------------------------------------------------------------------

def test_list_is_a_table_newest_first(three):
    lines = three.portal("list").stdout.decode().splitlines()
    assert lines[0].split() == ["ID", "STATE", "PROGRAM", "STARTED", "UPDATED", "LOOP", "(ITERATION)",
                                "CHECKPOINT", "EXPIRES", "IN"]
    rows = [l.split() for l in lines[1:]]
    assert [(r[0], r[1], r[2]) for r in rows] == [(three.failed, "failed", "fail.py"),
                                                 (three.completed, "completed", "ok.py"),
                                                 (three.suspended, "suspended", "loop.py")]
    # The suspended one: where it continues, its checkpoint's size, the time left.
    assert re.search(r" loop\.py:2 \(2\)\s+[\d.]+ KiB\s+(2d 23h|3d 0h)$", lines[3]), lines[3]
    # The others have nothing to continue.
    assert lines[1].rstrip().endswith("-                 -           -"), lines[1]


def test_list_json_and_state_filter(three):
    listed = three.listed()
    assert {k: v["state"] for k, v in listed.items()} == {
        three.suspended: "suspended", three.completed: "completed", three.failed: "failed"}
    s = listed[three.suspended]
    assert s["loop"].endswith("/loop.py:2") and s["iteration"] == 2
    assert s["held_by"] is None and s["checkpoint_bytes"] > 0
    only = json.loads(three.portal("list", "--json", "--state", "failed").stdout)
    assert [j["id"] for j in only] == [three.failed] and only[0]["exit_status"] == 3
    p = three.portal("list", "--state", "sleeping", expect=2)
    assert p.stderr.startswith(b"portal: --state sleeping: not one of running, suspended, "), p.stderr


# --- show ------------------------------------------------------------------------------

def test_show_a_suspended_job_says_where_and_how_to_resume(three):
    text = three.portal("show", three.suspended).stdout.decode()
    loop_py = str(three.work / "loop.py")
    assert "state       suspended\n" in text
    assert f"program     {loop_py}\n" in text
    assert f"cwd         {three.work}\n" in text
    assert f"error       MemoryError at {loop_py}:3\n" in text
    assert f"loop        {loop_py}:2, iteration 2 (0-based; runs again from its start)\n" in text
    assert re.search(r"checkpoint  [\d.]+ KiB in .*/jobs/" + three.suspended + "/checkpoint\n", text), text
    assert re.search(r"expires     \d{4}-\d\d-\d\d \d\d:\d\d UTC \((2d 23h|3d 0h) left\)\n", text), text
    # The same command the suspension report gave.
    suggested = re.search(rb"portal resume \S+ --mem (\d+G)\b", three.suspended_out).group(1).decode()
    # (and, when this machine has less, that it is for another one)
    assert re.search(rf"resume      portal resume {three.suspended} --mem {suggested}"
                     r"( \(this machine has [\d.]+ [KMGT]iB: on another one, or with --on slurm\))?\n", text), text
    assert "  1. run, " in text and ": suspended (exit status 75)\n" in text


def test_show_ended_jobs_and_json(three):
    text = three.portal("show", three.failed).stdout.decode()
    assert "state       failed\n" in text and re.search(r"ended       .* UTC, exit status 3\n", text), text
    assert "portal resume" not in text
    record = json.loads(three.portal("show", "--json", three.completed).stdout)
    assert record["state"] == "completed" and record["exit_status"] == 0
    assert [r["outcome"] for r in record["runs"]] == ["completed"]


def test_unknown_and_ambiguous_ids_are_refused(store):
    a, _ = store.run_job("ok.py", expect=0)
    b, _ = store.run_job("ok.py", expect=0)
    p = store.portal("show", "ok", expect=1)
    assert p.stderr.decode() == (f"portal: show: 'ok' matches several jobs: {', '.join(sorted([a, b]))} "
                                 f"(give more of the id)\n")
    p = store.portal("logs", "nothing", expect=1)
    assert p.stderr.startswith(b"portal: logs: no job 'nothing' in "), p.stderr
    # A unique prefix is enough: the shortest one of a's that b does not share.
    n = next(i for i in range(len(a)) if a[i] != b[i]) + 1
    assert store.portal("show", a[:n]).stdout.startswith(f"job         {a}\n".encode())


def test_usage_errors_exit_2_naming_the_command(store):
    p = store.portal("show", expect=2)
    # Worded as every option problem is (options.hpp), the command named in the hint.
    assert p.stderr == b"portal: JOB: missing (see portal show --help)\n"
    p = store.portal("gc", "--older-than", "soon", expect=2)
    assert p.stderr == b"portal: --older-than soon: not a number of days, 0 or more (e.g. 7, 0.5) " \
                       b"(see portal gc --help)\n", p.stderr
    p = store.portal("frobnicate", expect=2)
    assert p.stderr == b"portal: command: missing or unknown (see portal --help)\n", p.stderr
    help_text = store.portal("--help").stdout.decode()
    for command in ("run", "list", "show", "logs", "resume", "rm", "gc", "inspect"):
        assert re.search(rf"^  {command} ", help_text, re.M), (command, help_text)


# --- logs and resume -------------------------------------------------------------------

def test_logs_across_runs_are_the_programs_output(store):
    job, first = store.run_job("loop.py", fake=LOOP_OOM, expect=SUSPENDED)
    assert store.portal("logs", job).stdout == first
    second = subprocess.run([PORTAL, "resume", job[:-2]], cwd=store.home.parent, env=store.env(),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            timeout=RUN_TIMEOUT)
    assert second.returncode == 0, second.stdout
    logs = store.portal("logs", job).stdout
    assert logs == first + second.stdout
    assert store.portal("logs", job, "--run", "1").stdout == first
    assert store.portal("logs", job, "--run", "2").stdout == second.stdout
    # What the program printed, over both runs, is python's uninterrupted output.
    assert without_reports(logs) == python_output(store, "loop.py")
    p = store.portal("logs", job, "--run", "3", expect=1)
    assert p.stderr == f"portal: logs: job {job} has 2 runs, no run 3 (see portal show {job})\n".encode()
    shown = store.portal("show", job).stdout.decode()
    assert "state       completed\n" in shown and "  2. resume, " in shown and ": completed (exit status 0)" in shown


# --- rm --------------------------------------------------------------------------------

def test_rm_removes_ended_jobs_and_refuses_a_running_one(store):
    done, _ = store.run_job("ok.py", expect=0)
    proc = subprocess.Popen([PORTAL_RUN, "wait.py"], cwd=store.work, env=store.env(), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"ready\n"
        (running,) = set(store.ids()) - {done}
        listed = store.listed()
        assert listed[running]["state"] == "running"
        assert "portal-run wait.py" in listed[running]["held_by"]
        p = store.portal("rm", running, done, expect=1)
        assert re.match(rf"portal: rm: job {running} is in use by pid {proc.pid}, portal-run wait.py, since ",
                        p.stderr.decode()), p.stderr
        assert p.stdout.decode().startswith(f"removed {done} (completed, ")
        assert store.ids() == [running]
        shown = store.portal("show", running).stdout.decode()
        assert f"state       running (pid {proc.pid}, portal-run wait.py, since " in shown
    finally:
        proc.stdin.close()
        proc.wait(timeout=RUN_TIMEOUT)
    assert store.portal("rm", running).stdout.startswith(f"removed {running} (completed".encode())
    assert store.ids() == []


def test_a_job_whose_supervisor_was_killed_is_lost(store):
    proc = subprocess.Popen([PORTAL_RUN, "wait.py"], cwd=store.work, env=store.env(), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout.readline() == b"ready\n"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    (job,) = store.ids()
    assert store.record(job)["state"] == "running"
    # The interpreter holds the job's lock too (job_lock.hpp) until it is gone.
    deadline = time.monotonic() + RUN_TIMEOUT
    while store.listed()[job]["held_by"] is not None:
        assert time.monotonic() < deadline, "the killed interpreter kept the job's lock"
        time.sleep(0.02)
    listed = store.listed()[job]
    assert listed["state"] == "lost" and listed["recorded_state"] == "running"
    assert "state       lost (recorded as running, but no process holds it" in store.portal("show", job).stdout.decode()
    p = store.portal("resume", job, expect=1)
    assert p.stderr == f"portal: resume: job {job} is lost, not suspended: there is nothing to resume\n".encode()


# --- expiry and gc ---------------------------------------------------------------------

def test_any_command_expires_a_due_job_and_resume_says_when(store):
    job, _ = store.run_job("loop.py", fake=LOOP_OOM, expect=SUSPENDED)
    store.edit_record(job, expires_at="2026-01-02T03:04:05Z")
    assert (store.home / "jobs" / job / "checkpoint").exists()
    store.portal("list")
    record = store.record(job)
    assert record["state"] == "expired" and record["expired_at"] == "2026-01-02T03:04:05Z"
    assert not any(p.name.startswith(("checkpoint", ".checkpoint")) for p in (store.home / "jobs" / job).iterdir())
    p = store.portal("resume", job, expect=1)
    assert p.stderr.decode() == (f"portal: resume: job {job} expired at 2026-01-02T03:04:05Z: its checkpoint "
                                 "was kept 3 days and is deleted; there is nothing to resume\n")
    shown = store.portal("show", job).stdout.decode()
    assert "expired     2026-01-02 03:04 UTC (its checkpoint was kept 3 days and is deleted" in shown


def test_gc_expires_cleans_and_removes_old_jobs(store):
    due, _ = store.run_job("loop.py", fake=LOOP_OOM, expect=SUSPENDED)
    kept, _ = store.run_job("loop.py", fake=LOOP_OOM, expect=SUSPENDED)
    done, _ = store.run_job("ok.py", expect=0)
    failed, _ = store.run_job("fail.py", expect=3)
    store.edit_record(due, expires_at="2026-01-02T03:04:05Z")
    # What an interrupted checkpoint writer left in a job that has ended.
    leftover = store.home / "jobs" / done / ".checkpoint.tmp-1-ab"
    leftover.mkdir()
    (leftover / "state.pickle").write_bytes(b"x" * 5000)

    dry = store.portal("gc", "--dry-run").stdout.decode()
    assert re.search(rf"^would expire +{due} ", dry, re.M) and re.search(rf"^would clean +{done} ", dry, re.M), dry
    assert store.record(due)["state"] == "suspended" and leftover.exists()

    out = store.portal("gc").stdout.decode()
    assert re.search(rf"^expired +{due} +checkpoint kept 3 days, deleted +[\d.]+ KiB$", out, re.M), out
    assert re.search(rf"^cleaned +{done} +checkpoint of a completed job +4\.9 KiB$", out, re.M), out
    assert re.search(r"^freed [\d.]+ KiB in 2 jobs$", out, re.M), out
    assert kept not in out and failed not in out
    assert store.record(due)["state"] == "expired" and not leftover.exists()
    assert store.record(kept)["state"] == "suspended"
    assert store.portal("gc").stdout == b"nothing to free\n"

    store.edit_record(failed, updated="2026-01-01T00:00:00Z")
    out = store.portal("gc", "--older-than", "7").stdout.decode()
    assert re.search(rf"^removed +{failed} +failed job, last changed 2026-01-01 00:00 UTC ", out, re.M), out
    assert sorted(store.ids()) == sorted([due, kept, done])
    store.portal("gc", "--older-than", "0")
    assert store.ids() == [kept]   # a suspended job is never removed by age


# --- inspect ---------------------------------------------------------------------------

def inspect_module_installed():
    """`portal inspect` runs python/_portal/checkpoint/inspect_checkpoint.py, staged next to
    the built portal; a build without it cannot inspect at all."""
    pkg = Path(PORTAL).resolve().parent.parent / "lib" / "portal" / "python" / "_portal"
    return (pkg / "inspect_checkpoint.py").exists()


def test_inspect_a_job_checkpoint(three, tmp_path):
    if not inspect_module_installed():
        pytest.skip("python/_portal/checkpoint/inspect_checkpoint.py (module _portal.checkpoint.inspect_checkpoint) is not in "
                    "this build: it lands on another branch")
    loop_py = str(three.work / "loop.py")
    text = three.portal("inspect", three.suspended).stdout.decode()
    assert f"loop         {loop_py}:2" in text and ", iteration 2 (0-based)" in text, text
    assert "sound        yes: every check passed\n" in text, text
    report = json.loads(three.portal("inspect", "--json", str(three.home / "jobs" / three.suspended)).stdout)
    assert report["sound"] is True and report["loop"]["iteration"] == 2
    assert "state.pickle" in [f["name"] for f in report["files"]]
    # A truncated copy is not sound: exit 1, the bad file named; the job's own is untouched.
    copy = tmp_path / "copy"
    shutil.copytree((three.home / "jobs" / three.suspended / "checkpoint").resolve(), copy)
    pickle = copy / "state.pickle"
    pickle.write_bytes(pickle.read_bytes()[:-10])
    p = three.portal("inspect", str(copy), expect=1)
    assert p.stderr.startswith(b"portal: inspect: ") and b"state.pickle" in p.stderr, p.stderr
    three.portal("inspect", three.suspended)


def test_inspect_a_job_without_a_checkpoint_is_refused(three):
    p = three.portal("inspect", three.failed, expect=1)
    assert p.stderr.decode() == (f"portal: inspect: job {three.failed} has no checkpoint (it is failed; "
                                 "a job keeps one only while it is suspended)\n")
