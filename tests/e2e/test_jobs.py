"""The job lifecycle as the supervisor records it (docs/job-store.md): every run is
a job; its runs, states and output are recorded; one process runs a job at a
time; a job whose supervisor died is lost; an expired job is not resumed."""
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import PYTHON, python_version, store_env  # PYTHON: the interpreter under test ($PORTAL_PYTHON)

HERE = Path(__file__).parent / "jobs"
PORTAL_RUN = os.environ.get("PORTAL_RUN") or shutil.which("portal-run")
PORTAL = os.environ.get("PORTAL") or str(Path(PORTAL_RUN).with_name("portal"))


@pytest.fixture
def work(tmp_path):
    shutil.copytree(HERE, tmp_path / "work")
    return tmp_path / "work"


def env_for(work, **extra):
    return store_env(work.parent / "home", **extra)


def run(cmd, work, **extra):
    return subprocess.run(cmd, cwd=work, capture_output=True, env=env_for(work, **extra), timeout=120)


def only_job(work):
    jobs = sorted((work.parent / "home" / "jobs").iterdir())
    assert len(jobs) == 1, jobs
    return jobs[0]


def record(job_dir):
    return json.loads((job_dir / "job.json").read_text())


def interleaves(merged, a, b):
    """Whether `merged` is `a` and `b` interleaved, each keeping its own order."""
    if len(merged) != len(a) + len(b):
        return False
    reachable = {0}  # how much of `a` can be used up after each prefix of `merged`
    for k, byte in enumerate(merged):
        reachable = {i + 1 for i in reachable if i < len(a) and a[i] == byte} | \
                    {i for i in reachable if k - i < len(b) and b[k - i] == byte}
        if not reachable:
            return False
    return True


def log_says(work, text):
    """Whether the only job's output.log holds `text` yet (False before it exists)."""
    jobs = work.parent / "home" / "jobs"
    logs = list(jobs.glob("*/output.log")) if jobs.exists() else []
    return bool(logs) and text in logs[0].read_bytes()


def wait_for(predicate, what, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_plain_run_is_a_completed_job_with_its_output_kept(work):
    python = subprocess.run([PYTHON, "counter.py"], cwd=work, capture_output=True)
    r = run([PORTAL_RUN, "counter.py", "--flag"], work)
    assert (r.returncode, r.stdout, r.stderr) == (0, python.stdout, python.stderr)
    job = only_job(work)
    rec = record(job)
    assert job.name.startswith("counter-")
    assert rec["state"] == "completed" and rec["exit_status"] == 0
    assert rec["program"] == {"kind": "script", "target": str(work / "counter.py")}
    assert rec["args"] == ["--flag"] and rec["cwd"] == str(work)
    [only] = rec["runs"]
    assert only["kind"] == "run" and only["outcome"] == "completed" and only["output_kept"]
    assert only["command"] == ["portal-run", "counter.py", "--flag"]
    # Two streams on two pipes: the log has both, each in its order, merged as the
    # writes arrived (python writes stderr's words one by one).
    log = (job / "output.log").read_bytes()
    assert interleaves(log, python.stdout, python.stderr)
    assert os.stat(job).st_mode & 0o777 == 0o700
    for name in ("job.json", "output.log", "job.lock"):
        assert os.stat(job / name).st_mode & 0o777 == 0o600, name


def test_merged_output_is_kept_in_order(work):
    with open(work / "out.txt", "wb") as out:
        r = subprocess.run([PORTAL_RUN, "counter.py"], cwd=work, stdout=out, stderr=subprocess.STDOUT,
                           env=env_for(work))
    assert r.returncode == 0
    assert (only_job(work) / "output.log").read_bytes() == (work / "out.txt").read_bytes()


def test_a_failing_run_is_a_failed_job(work):
    (work / "fail.py").write_text("print('before')\nraise SystemExit(3)\n")
    r = run([PORTAL_RUN, "fail.py"], work)
    assert r.returncode == 3
    rec = record(only_job(work))
    assert rec["state"] == "failed" and rec["exit_status"] == 3
    assert rec["runs"][0]["outcome"] == "failed"


def test_suspension_and_resumption_are_logged_runs(work):
    python = subprocess.run([PYTHON, "counter.py"], cwd=work, capture_output=True)
    first = run([PORTAL_RUN, "counter.py"], work, PORTAL_FAKE_OOM="counter.py:13@4")
    assert first.returncode == 75, first.stderr
    job = only_job(work)
    rec = record(job)
    assert rec["state"] == "suspended"
    [suspended] = rec["runs"]
    assert suspended["outcome"] == "suspended" and suspended["exit_status"] == 75
    assert suspended["loop"] == f"{work / 'counter.py'}:8" and suspended["iteration"] == 3
    assert suspended["checkpoint_bytes"] > 0 and suspended["expires_at"] == rec["expires_at"]
    log_after_first = (job / "output.log").read_bytes()
    assert b"portal: suspended: " in log_after_first

    second = run([PORTAL, "resume", job.name[:10]], work)
    assert second.returncode == 0, second.stderr
    assert first.stdout + second.stdout == python.stdout
    rec = record(job)
    assert rec["state"] == "completed"
    assert [r["kind"] for r in rec["runs"]] == ["run", "resume"]
    assert [r["outcome"] for r in rec["runs"]] == ["suspended", "completed"]
    assert rec["runs"][1]["command"][:3] == ["portal", "resume", job.name]
    log = (job / "output.log").read_bytes()
    assert log.startswith(log_after_first)
    assert rec["runs"][1]["log_offset"] == len(log_after_first)
    assert interleaves(log[len(log_after_first):], second.stdout, second.stderr)


def test_a_job_is_resumed_by_one_process_at_a_time(work):
    # The resumed program has the environment the job started with: it waits at
    # step 3, after the suspension at step 1, until the test lets it go.
    go = work / "go"
    first = run([PORTAL_RUN, "counter.py"], work, PORTAL_FAKE_OOM="counter.py:13@2",
                WAIT_AT="3", WAIT_FILE=str(go))
    assert first.returncode == 75, first.stderr
    job = only_job(work)
    resumer = subprocess.Popen([PORTAL, "resume", job.name], cwd=work, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env_for(work))
    try:
        wait_for(lambda: record(job)["state"] == "running", "the resumed job to run")
        second = run([PORTAL, "resume", job.name], work)
        assert second.returncode == 1
        message = second.stderr.decode()
        assert message.startswith(f"portal: resume: job {job.name} is running (pid {resumer.pid}, "
                                  f"portal resume {job.name}, since "), message
        assert "one process runs a job at a time" in message
    finally:
        go.touch()
        out, err = resumer.communicate(timeout=60)
    assert resumer.returncode == 0, err
    assert record(job)["state"] == "completed"
    assert len(record(job)["runs"]) == 2  # the refused one did not count as a run


def test_a_job_whose_supervisor_was_killed_is_lost(work):
    go = work / "go"
    p = subprocess.Popen([PORTAL_RUN, "counter.py"], cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env_for(work, WAIT_AT="2", WAIT_FILE=str(go)), start_new_session=True)
    try:
        wait_for(lambda: log_says(work, b"waiting"), "the program to start")
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # the interpreter, if not gone with its supervisor
        except ProcessLookupError:
            pass
    job = only_job(work)
    assert record(job)["state"] == "running"
    # The interpreter holds the job's lock too (job_lock.hpp) until it is gone.
    wait_for(lambda: not json.loads(run([PORTAL, "list", "--json"], work).stdout)[0]["held_by"],
             "the killed interpreter to let go of the job's lock")
    r = run([PORTAL, "resume", job.name], work)
    assert r.returncode == 1
    assert r.stderr.decode() == (f"portal: resume: job {job.name} is lost, not suspended: "
                                 f"there is nothing to resume\n")


def test_an_expired_job_is_not_resumed_and_its_checkpoint_is_gone(work):
    assert run([PORTAL_RUN, "counter.py"], work, PORTAL_FAKE_OOM="counter.py:13@2").returncode == 75
    job = only_job(work)
    rec = record(job)
    rec["expires_at"] = "2020-01-02T03:04:05Z"
    (job / "job.json").write_text(json.dumps(rec))
    r = run([PORTAL, "resume", job.name], work)
    assert r.returncode == 1
    assert r.stderr.decode() == (f"portal: resume: job {job.name} expired at 2020-01-02T03:04:05Z: its "
                                 f"checkpoint was kept 3 days and is deleted; there is nothing to resume\n")
    rec = record(job)
    assert rec["state"] == "expired" and rec["expired_at"] == "2020-01-02T03:04:05Z"
    assert not [p.name for p in job.iterdir() if "checkpoint" in p.name]
    assert (job / "output.log").exists()


def test_a_refused_resume_leaves_the_job_suspended(work):
    assert run([PORTAL_RUN, "counter.py"], work, PORTAL_FAKE_OOM="counter.py:13@2").returncode == 75
    job = only_job(work)
    with open(work / "counter.py", "a") as f:
        f.write("# edited\n")
    r = run([PORTAL, "resume", job.name], work)
    assert r.returncode == 1, r.stderr
    rec = record(job)
    assert rec["state"] == "suspended"
    assert [x["outcome"] for x in rec["runs"]] == ["suspended", "refused"]


def test_output_on_a_terminal_is_kept_and_the_program_still_sees_a_terminal(work):
    import pty
    import termios
    import fcntl
    import struct
    (work / "tty.py").write_text(
        "import os, sys\n"
        "print('tty', sys.stdout.isatty(), sys.stderr.isatty(), os.get_terminal_size())\n"
        "print('to stderr', file=sys.stderr)\n")
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 99, 0, 0))
    try:
        p = subprocess.Popen([PORTAL_RUN, "tty.py"], cwd=work, stdin=slave, stdout=slave, stderr=slave,
                             env=env_for(work), start_new_session=True)
        os.close(slave)
        seen = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the terminal's last user closed it
                break
            if not chunk:
                break
            seen += chunk
        assert p.wait(timeout=60) == 0
    finally:
        os.close(master)
    expected = b"tty True True os.terminal_size(columns=99, lines=33)\nto stderr\n"
    assert seen == expected.replace(b"\n", b"\r\n")  # the real terminal did its own \r\n
    job = only_job(work)
    assert (job / "output.log").read_bytes() == expected
    assert record(job)["runs"][0]["output_kept"] is True


# How python itself ends when its stdout's reader goes away: up to 3.13 the
# BrokenPipeError's traceback and status 1; 3.14 also fails to flush stdout at exit,
# reports it and exits 120 (measured with python3.14 in the forky root).
PYTHON_BROKEN_PIPE_END = (b"BrokenPipeError: [Errno 32] Broken pipe\nstatus 1\n"
                          if tuple(int(p) for p in python_version().split(".")[:2]) < (3, 14) else
                          b"Exception ignored while flushing sys.stdout:\n"
                          b"BrokenPipeError: [Errno 32] Broken pipe\nstatus 120\n")


def test_a_reader_that_goes_away_breaks_the_programs_pipe_as_under_python(work):
    """`portal-run x.py | head -2`: the program still gets EPIPE (BrokenPipeError),
    though its stdout is the supervisor's pipe, and ends as under python."""
    code = "for i in range(10**6): print(i)"
    shell = "{} -c '{}' | head -2; echo status ${{PIPESTATUS[0]}} >&2"
    python = subprocess.run(["bash", "-c", shell.format(PYTHON, code)], cwd=work, capture_output=True,
                            env=env_for(work), timeout=60)
    portal = subprocess.run(["bash", "-c", shell.format(PORTAL_RUN, code)], cwd=work, capture_output=True,
                            env=env_for(work), timeout=60)
    assert python.stdout == portal.stdout == b"0\n1\n"
    assert portal.stderr == python.stderr
    assert python.stderr.endswith(PYTHON_BROKEN_PIPE_END)
