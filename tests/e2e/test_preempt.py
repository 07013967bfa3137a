"""Preemption (docs/preemption.md): SIGTERM to portal-run (and --preempt-signal's
signal) makes the program suspend at the start of its next loop iteration,
reason `preempted`, exit 75; `portal resume` continues it bit for bit.  Signals
at seeded random moments of a torch training loop (some before its first loop
or after its last: the run then simply finishes); the grace, after which the
program gets the signal as under python; a second signal during the write."""
import os
import random
import re
import signal
import subprocess
import time

import pytest

from conftest import read_until
from policy_helpers import (PORTAL, PORTAL_RUN, SUSPENDED, TIMEOUT, corpus, env_for, lines,
                            only_job, portal, python, record)

pytest.importorskip("torch", reason="the preemption tests train a torch model")

SEED = 20261201
STEPS, STEP_SECONDS = "24", "0.08"


@pytest.fixture
def work(tmp_path):
    return corpus(tmp_path)


def signalled(cmd, work, delay, sig=signal.SIGTERM, repeat=(), env=None, after_ready=False):
    """Run `cmd`, send `sig` after `delay` seconds (counted from its `ready` line
    with after_ready), then once more after each extra delay in `repeat`, and
    wait for it."""
    proc = subprocess.Popen(cmd, cwd=work, env=env_for(work, **(env or {})),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    head = b""
    try:
        if after_ready:
            head = read_until(proc.stdout.fileno(), b"ready\n", time.monotonic() + TIMEOUT, cmd[-1])
        for wait in (delay, *repeat):
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                proc.send_signal(sig)
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, head + out, err


def test_sigterm_at_random_moments_then_resume_is_bit_for_bit(work):
    expected = python(work, "train_preempt.py", STEPS, STEP_SECONDS)
    assert expected.returncode == 0, expected.stderr.decode()
    rng = random.Random(SEED)
    suspensions = 0
    for attempt in range(3):
        delay = rng.uniform(0.0, 6.0)
        code, out, err = signalled([PORTAL_RUN, "train_preempt.py", STEPS, STEP_SECONDS],
                                   work, delay)
        outputs = [out]
        stuck, last = 0, None   # resumes in a row suspended where the one before was
        while code == SUSPENDED:
            suspensions += 1
            # portal-run's, or a resume's (taken at once when it came during the restore)
            assert re.search(rb"^portal: suspended: preempted \((portal-run|portal resume) was sent its "
                             rb"preemption signal\)", err, re.M), err
            assert b"that iteration had not started yet" in err
            assert b"will differ" not in err      # nothing of that iteration ran
            job = only_job(work)
            assert record(work, job)["reason"] == "preempted"
            at = record(work, job)["runs"][-1].get("iteration")
            stuck, last = (stuck + 1 if at == last else 0), at
            # A resume signalled before its restore is done is preempted again at once;
            # where the restore takes longer than the delays (a slow lane), each later
            # delay doubles, so that the job makes progress and the test ends.
            code, out, err = signalled([PORTAL, "resume", job], work,
                                       rng.uniform(0.5, 4.0) * 2 ** min(stuck, 4))
            outputs.append(out)
        if code == -signal.SIGTERM and b"portal: preempt: no loop could be suspended" in err:
            # The signal came once the training loop's last iteration had begun: no
            # iteration is left to save, the one loop after it (the digest's) holds a
            # hashlib object, which Portal says it cannot save, and the program ends by
            # the signal as under python - having printed exactly python's lines so far,
            # the last step's included.
            done = b"".join(outputs)
            assert f"step {int(STEPS) - 1} ".encode() in done, (delay, err.decode())
            assert expected.stdout.startswith(done), f"delay {delay:.2f} s"
        else:
            assert code == 0, (delay, err.decode())
            assert b"".join(outputs) == expected.stdout, f"delay {delay:.2f} s"
        for job in (work.parent / "home" / "jobs").iterdir():
            portal(work, "rm", job.name)
    assert suspensions >= 1, "no signal arrived while the loop ran: the delays are too long"


def test_preempt_signal_usr1(work):
    # oom.exact=true declines a point where something will differ: not a safe point
    code, out, err = signalled([PORTAL_RUN, "--preempt-signal", "USR1", "--policy", "oom.exact=true",
                                "train_preempt.py", "200",
                                "0.05"], work, 1.0, sig=signal.SIGUSR1, after_ready=True)
    assert code == SUSPENDED, err.decode()
    runs = record(work, only_job(work))["runs"]
    assert runs[-1]["outcome"] == "suspended" and runs[-1]["reason"] == "preempted"


def test_without_a_safe_point_in_the_grace_the_program_gets_the_signal(work):
    start = time.monotonic()
    code, out, err = signalled([PORTAL_RUN, "--preempt-grace", "2", "slow_body.py"], work, 1.5,
                               after_ready=True)
    assert code == -signal.SIGTERM, err.decode()
    assert time.monotonic() - start < 25
    assert lines(err, "portal: preempt: ") == [
        "portal: preempt: no loop iteration started within the grace of 2 s (--preempt-grace): "
        "the program gets SIGTERM, as under python"]
    assert record(work, only_job(work))["state"] == "failed"


def test_a_program_without_loops_gets_the_signal_at_once(work):
    (work / "sleeper.py").write_text("import time\nprint('ready', flush=True)\ntime.sleep(60)\n")
    start = time.monotonic()
    code, out, err = signalled([PORTAL_RUN, "sleeper.py"], work, 0.5, after_ready=True)
    assert (code, err) == (-signal.SIGTERM, b"")
    assert time.monotonic() - start < 20


def test_a_second_signal_during_the_write_changes_nothing(work):
    expected = python(work, "big_state.py")
    code, out, err = signalled([PORTAL_RUN, "big_state.py"], work, 1.0, repeat=[0.05] * 8,
                               after_ready=True)
    assert code == SUSPENDED, err.decode()
    job = only_job(work)
    jobdir = work.parent / "home" / "jobs" / job
    # the link and the one generation it names; no temporary directory left
    names = sorted(p.name for p in jobdir.iterdir() if p.name.startswith(("checkpoint", ".")))
    assert names == ["checkpoint", os.readlink(jobdir / "checkpoint")], names
    checked = portal(work, "inspect", job)
    assert checked.returncode == 0, checked.stderr.decode()
    resumed = portal(work, "resume", job)
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert out + resumed.stdout == expected.stdout


def test_the_grace_stops_once_the_checkpoint_is_being_written(work):
    # A state that takes far longer than the grace to write: the program reached its
    # safe point within the grace, and from then on only a write that stops making
    # progress is cut short (docs/preemption.md).
    size = str(400 << 20)
    expected = python(work, "big_state.py", size, "numbered")
    grace = 0.3   # the write of 400 MiB takes 0.6-2 s on this machine kind
    proc = subprocess.Popen([PORTAL_RUN, "--preempt-grace", str(grace), "big_state.py", size, "numbered"], cwd=work,
                            env=env_for(work), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out = read_until(proc.stdout.fileno(), b"ready\n", time.monotonic() + TIMEOUT, "big_state.py")
        time.sleep(0.3)
        signalled_at = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=TIMEOUT)
        took = time.monotonic() - signalled_at
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out += rest
    code = proc.returncode
    assert code == SUSPENDED, err.decode()
    # a safe point comes within 0.05 s: the rest is the write, longer than the grace
    assert took > grace, f"the suspension took {took:.2f} s: too little to test the grace"
    assert b"no loop iteration started within the grace" not in err, err
    job = only_job(work)
    jobdir = work.parent / "home" / "jobs" / job
    names = sorted(p.name for p in jobdir.iterdir() if p.name.startswith(("checkpoint", ".")))
    assert names == ["checkpoint", os.readlink(jobdir / "checkpoint")], names   # no temporary directory
    resumed = portal(work, "resume", job)
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert out + resumed.stdout == expected.stdout


def test_sigterm_during_the_restore_is_taken_at_the_first_iteration(work):
    # 300 MiB to read back: SIGTERM 50-800 ms after `portal resume` starts comes
    # while the interpreter starts or restores (or, late, in the first iterations);
    # it is held and taken at the first iteration start, never lost.
    expected = python(work, "big_state.py")
    code, out, err = signalled([PORTAL_RUN, "big_state.py"], work, 0.3, after_ready=True)
    assert code == SUSPENDED, err.decode()
    job = only_job(work)
    outputs = [out]
    rng = random.Random(SEED)
    at_once = 0
    for delay in sorted(rng.uniform(0.05, 0.8) for _ in range(4)):
        before = record(work, job)["iteration"]
        code, out, err = signalled([PORTAL, "resume", job], work, delay)
        assert code == SUSPENDED, (delay, err.decode())
        assert b"portal: suspended: preempted" in err, err
        rec = record(work, job)
        assert rec["reason"] == "preempted"
        # the iterations it ran, each printed: none when the signal came before the first
        assert rec["iteration"] - before == out.count(b"iteration "), (delay, out)
        at_once += rec["iteration"] == before
        outputs.append(out)
    assert at_once >= 1, "no signal came during a restore: the delays are too long"
    resumed = portal(work, "resume", job)
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert b"".join(outputs) + resumed.stdout == expected.stdout
