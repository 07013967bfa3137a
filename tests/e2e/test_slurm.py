"""Slurm (issue 13, item 3; docs/slurm.md), against a real single-node Slurm that the
session fixture `slurm_cluster` (conftest.py, scripts/slurm-cluster.sh) starts on
loopback and stops at the end, every job and daemon included:

- `portal resume JOB --on slurm` submits the resume with sbatch (--mem, --time
  passed on), prints the Slurm job id, records it; `portal logs -f` follows the
  Slurm job until it ends and gives back the uninterrupted run's output, and
  `portal show` says its Slurm state; the batch script quotes a store path that
  holds a quote, spaces and `$(...)`;
- `--on bogus` is refused naming what is supported (exit 2); no sbatch, a clear
  refusal; a store on a local disk submitted to a partition of 2 nodes: a warning;
- a batch job running `portal-run --requeue` that is suspended, then requeued with
  `scontrol requeue`, resumes its own job when it starts again and finishes with
  the uninterrupted run's output; requeued once more, the completed job is not run
  again;
- `sbatch --requeue --signal=B:USR1@50` with `portal-run --requeue
  --preempt-signal USR1` inside: preempted (suspended at an iteration start),
  requeued by portal-run itself, resumed, finished with the uninterrupted result.

Slurm checks time limits about every 30 s and starts a requeued job ~6 s later
(cred_expire=5): every wait below is in tens of seconds, never tight.
"""
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import PYTHON, base_env

PORTAL_RUN = os.environ.get("PORTAL_RUN")
PORTAL = os.environ.get("PORTAL") or (PORTAL_RUN and str(Path(PORTAL_RUN).with_name("portal")))
SUSPENDED = 75
USAGE = 2
REFUSED = 1
COMMAND_TIMEOUT = 60      # one portal command
SLURM_JOB_TIMEOUT = 150   # a Slurm job from submission to its end (a requeue start takes ~6 s)
POLL = 0.5

# A deterministic training-like loop: a random draw and a running state per step.
TRAIN = """\
import os, random, sys, time
random.seed(1234)
state = 0
steps = int(os.environ.get("STEPS", "8"))
pause = float(os.environ.get("STEP_SLEEP", "0"))
for step in range(steps):
    x = random.random()
    state = (state * 31 + int(x * 1e6)) % (1 << 61)
    print("step", step, state, flush=True)
    time.sleep(pause)
print("result", state, flush=True)
"""
TRAIN_OOM = "/train.py:7@3"   # `x = random.random()` the 3rd time: step 2 runs again on resume
# The states a job passes through on its way: SIGNALING is squeue's word for a running
# job while slurmctld delivers a --signal (seen on CI between two polls), STAGE_OUT for
# one finishing its burst-buffer stage; neither is an end.
ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "SIGNALING", "STAGE_OUT"}


def without_reports(text: bytes) -> bytes:
    return b"".join(l for l in text.splitlines(keepends=True) if not l.startswith(b"portal: "))


class SlurmStore:
    """A job store (at a path that needs quoting in a shell) and a work directory,
    with the Slurm clients pointed at the test cluster."""

    def __init__(self, root: Path, cluster):
        self.cluster = cluster
        self.home = root / "it's a $(touch PWNED) store"
        self.work = root / "work"
        self.work.mkdir()
        (self.work / "train.py").write_text(TRAIN)

    def env(self, **extra):
        return self.cluster.env(base_env({"PORTAL_HOME": str(self.home), **extra}))

    def ids(self):
        jobs = self.home / "jobs"
        return sorted(p.name for p in jobs.iterdir()) if jobs.exists() else []

    def record(self, job):
        return json.loads((self.home / "jobs" / job / "job.json").read_text())

    def portal(self, *args, expect=0, env=None, timeout=COMMAND_TIMEOUT):
        p = subprocess.run([PORTAL, *args], cwd=self.work, env=env or self.env(), stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=timeout)
        assert p.returncode == expect, (args, p.returncode, p.stdout, p.stderr)
        return p

    def suspended_job(self, **env):
        before = set(self.ids())
        p = subprocess.run([PORTAL_RUN, "train.py"], cwd=self.work, env=self.env(PORTAL_FAKE_OOM=TRAIN_OOM, **env),
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=COMMAND_TIMEOUT)
        assert p.returncode == SUSPENDED, p.stderr
        (job,) = set(self.ids()) - before
        return job

    def python_output(self, **env):
        return subprocess.run([PYTHON, "train.py"], cwd=self.work, env=base_env(env), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, timeout=COMMAND_TIMEOUT, check=True).stdout

    def slurm(self, *args, check=True):
        return subprocess.run(list(args), env=self.env(), capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT, check=check)

    def slurm_state(self, slurm_job):
        return self.slurm("squeue", "-h", "-t", "all", "-j", slurm_job, "-o", "%T").stdout.strip()

    def wait_state(self, slurm_job, wanted, timeout=SLURM_JOB_TIMEOUT):
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.slurm_state(slurm_job)
            if state in wanted:
                return state
            time.sleep(POLL)
        log = self.cluster.base / "log" / "slurmctld.log"
        raise AssertionError(f"Slurm job {slurm_job} is {state!r}, not {wanted}, after {timeout} s; "
                             f"slurmctld: {log.read_text()[-2000:] if log.exists() else '-'}")

    def sbatch(self, script_text, *options, **env):
        script = self.work / "job.sh"
        script.write_text(script_text)
        p = subprocess.run(["sbatch", "--parsable", f"--output={self.work}/slurm-%j.out", *options, str(script)],
                           cwd=self.work, env=self.env(**env), capture_output=True, text=True,
                           timeout=COMMAND_TIMEOUT)
        assert p.returncode == 0, p.stderr
        return p.stdout.strip().split(";")[0]


@pytest.fixture
def store(tmp_path, slurm_cluster):
    return SlurmStore(tmp_path, slurm_cluster)


@pytest.fixture
def bare_store(tmp_path):
    """For the refusals that never reach Slurm."""
    class NoCluster:
        def env(self, env):
            return env
    return SlurmStore(tmp_path, NoCluster())


# --- portal resume --on slurm ----------------------------------------------------------

def test_resume_on_slurm_runs_on_the_node_and_logs_follow_it(store):
    job = store.suspended_job()
    submitted = store.portal("resume", job, "--on", "slurm", "--mem", "1G", "--time", "5")
    slurm_job = submitted.stdout.decode().strip()
    assert re.fullmatch(rb"[0-9]+\n", submitted.stdout), submitted.stdout
    assert f"portal: resume: job {job} submitted as Slurm job {slurm_job}".encode() in submitted.stderr
    assert b"warning" not in submitted.stderr  # a single-node partition of this machine: its disk is seen
    record = store.record(job)
    assert record["slurm"]["job_id"] == slurm_job
    assert record["slurm"]["output"] == str(store.home / "jobs" / job / f"slurm-{slurm_job}.out")

    # What sbatch was asked for, as Slurm knows it.
    shown = store.slurm("scontrol", "show", "job", slurm_job, "-o").stdout
    assert "MinMemoryNode=1G" in shown and "TimeLimit=00:05:00" in shown, shown
    assert f"JobName=portal-{job}" in shown

    # While it is queued or runs (or already ended, on a fast day), show names it.
    early = store.portal("show", job).stdout.decode()
    assert re.search(rf"^slurm +job {slurm_job} on partition debug, submitted .*: [A-Z]+$", early, re.M), early

    # logs -f returns once the Slurm job has ended, with the whole output.
    followed = store.portal("logs", "-f", job, timeout=SLURM_JOB_TIMEOUT)
    assert without_reports(followed.stdout) == store.python_output()
    assert f"portal: logs: Slurm job {slurm_job} of job {job} is COMPLETED".encode() in followed.stderr

    shown = store.portal("show", job).stdout.decode()
    assert re.search(r"^state +completed", shown, re.M), shown
    assert re.search(rf"^slurm +job {slurm_job} .*: COMPLETED$", shown, re.M), shown
    as_json = json.loads(store.portal("show", "--json", job).stdout)
    assert as_json["slurm"]["state"] == "COMPLETED" and as_json["slurm"]["job_id"] == slurm_job
    assert [r["kind"] for r in as_json["runs"]] == ["run", "resume"]
    assert as_json["runs"][1]["outcome"] == "completed"
    assert as_json["runs"][1]["command"][1:4] == ["resume", job, "--mem"]  # the node's resume

    # The Slurm job's own file holds the program's output too.
    slurm_out = Path(record["slurm"]["output"]).read_bytes()
    assert b"result " in slurm_out
    # The store's path reached the node quoted: nothing of it ran as a command.
    assert not list(store.work.parent.rglob("PWNED"))
    assert not (Path(store.home.parent) / "PWNED").exists()


def test_plain_logs_and_a_second_submission_while_one_is_queued(store):
    job = store.suspended_job()
    first = store.portal("resume", job, "--on", "slurm:debug", "--time", "5").stdout.decode().strip()
    again = store.portal("resume", job, "--on", "slurm", expect=REFUSED)
    state = store.slurm_state(first)
    if state in ACTIVE:  # the refusal is about the one queued
        assert f"is already submitted as Slurm job {first}".encode() in again.stderr, again.stderr
    store.wait_state(first, {"COMPLETED"})
    # Without -f: the log as kept, the Slurm run's included.
    assert without_reports(store.portal("logs", job).stdout) == store.python_output()


def test_a_partition_of_more_nodes_than_this_one_warns_about_a_local_store(store):
    job = store.suspended_job()
    p = store.portal("resume", job, "--on", "slurm:wide", "--time", "5")
    slurm_job = p.stdout.decode().strip()
    try:
        assert re.search(rb"portal: resume: --on slurm:wide: warning: the job store PORTAL_HOME=.* is on .*"
                         rb"which partition wide \(2 nodes\) may not see: every node must mount it at the same "
                         rb"path \(NFS, Lustre, GPFS, ...; docs/slurm.md\); submitted anyway", p.stderr), p.stderr
        assert store.record(job)["slurm"]["partition"] == "wide"
    finally:
        store.slurm("scancel", slurm_job, check=False)


def test_a_store_in_memory_is_refused_for_a_partition_of_more_nodes(tmp_path, slurm_cluster):
    shm = Path("/dev/shm")
    fs_type = subprocess.run(["stat", "-f", "-c", "%T", str(shm)], capture_output=True, text=True).stdout.strip()
    if fs_type != "tmpfs":
        pytest.skip(f"/dev/shm is {fs_type or 'absent'} here, not tmpfs: no store in memory to refuse")
    root = Path(tempfile.mkdtemp(prefix="portal-slurm-test-", dir=shm))
    try:
        store = SlurmStore(root, slurm_cluster)
        job = store.suspended_job()
        p = store.portal("resume", job, "--on", "slurm:wide", expect=REFUSED)
        assert p.stdout == b""
        assert p.stderr == (f"portal: resume: --on slurm:wide: the job store PORTAL_HOME={store.home} is on tmpfs "
                            f"(this machine's memory), which partition wide (2 nodes) may not see: every node must "
                            f"mount it at the same path (NFS, Lustre, GPFS, ...; docs/slurm.md); the job stays "
                            f"suspended (portal resume {job})\n").encode()
        assert store.record(job)["state"] == "suspended" and "slurm" not in store.record(job)
        # This machine alone (partition debug) sees its own memory: submitted.
        slurm_job = store.portal("resume", job, "--on", "slurm:debug").stdout.decode().strip()
        store.wait_state(slurm_job, {"COMPLETED"})
        assert store.record(job)["state"] == "completed"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_on_values_other_than_local_and_slurm_are_refused(bare_store):
    job = bare_store.suspended_job()
    for spec in ("bogus", "slurm:", "slurm:a b", "slurm;true", "ssh:host"):
        p = bare_store.portal("resume", job, "--on", spec, expect=USAGE)
        assert p.stderr == f"portal: resume: --on {spec}: not supported (local, slurm[:PARTITION])\n".encode()
    p = bare_store.portal("resume", job, "--time", "5", expect=USAGE)
    assert p.stderr.startswith(b"portal: resume: --time is for --on slurm")
    assert bare_store.record(job)["state"] == "suspended"
    assert "slurm" not in bare_store.record(job)


def test_without_sbatch_the_job_stays_suspended(bare_store, tmp_path):
    job = bare_store.suspended_job()
    empty = tmp_path / "empty-path"
    empty.mkdir()
    p = bare_store.portal("resume", job, "--on", "slurm", expect=REFUSED, env=bare_store.env(PATH=str(empty)))
    assert p.stderr == (f"portal: resume: --on slurm: sbatch is not installed here (Debian: apt-get install "
                        f"slurm-client; a cluster's login node has it): the job stays suspended "
                        f"(portal resume {job})\n").encode()
    assert bare_store.record(job)["state"] == "suspended"


def test_on_slurm_takes_more_memory_than_this_machine_has(bare_store, tmp_path):
    """--mem is the node's: not refused against this machine (sbatch is missing here,
    so the refusal is the next one)."""
    job = bare_store.suspended_job()
    empty = tmp_path / "empty-path"
    empty.mkdir()
    p = bare_store.portal("resume", job, "--on", "slurm", "--mem", "100000", expect=REFUSED,
                          env=bare_store.env(PATH=str(empty)))
    assert b"sbatch is not installed here" in p.stderr
    p = bare_store.portal("resume", job, "--mem", "100000", expect=USAGE)
    assert p.stderr.startswith(b"portal: --mem 100000: this machine has ")


# --- portal-run --requeue --------------------------------------------------------------

def requeue_script(*portal_options):
    words = " ".join(["exec", f"'{PORTAL_RUN}'", "--requeue", *portal_options, "train.py"])
    return f"#!/bin/sh\n{words}\n"


def test_a_requeued_batch_job_resumes_its_own_job(store):
    slurm_job = store.sbatch(requeue_script(), PORTAL_FAKE_OOM=TRAIN_OOM)
    store.wait_state(slurm_job, {"FAILED"})  # exit 75: suspended by the fake OOM
    (job,) = store.ids()
    record = store.record(job)
    assert record["state"] == "suspended"
    assert record["slurm"]["requeue_key"] == f"portal/{slurm_job}"
    first_out = (store.work / f"slurm-{slurm_job}.out").read_bytes()
    assert (f"portal: requeue: job {job} is suspended (not preempted): Slurm job {slurm_job} ends".encode()
            in first_out), first_out

    store.slurm("scontrol", "requeue", slurm_job)
    store.wait_state(slurm_job, {"COMPLETED"})
    assert store.ids() == [job]  # the same Portal job, not a new one
    record = store.record(job)
    assert record["state"] == "completed"
    assert [(r["kind"], r["outcome"]) for r in record["runs"]] == [("run", "suspended"), ("resume", "completed")]
    assert record["runs"][1]["command"][1:4] == ["resume", job, "--requeue"]
    assert record["slurm"]["restart_count"] == 1
    assert without_reports(store.portal("logs", job).stdout) == store.python_output()
    shown = store.portal("show", job).stdout.decode()
    assert re.search(rf"^slurm +job {slurm_job} \(portal-run --requeue, started 2 times\): COMPLETED$", shown,
                     re.M), shown

    # Requeued once more: the completed job is not run again.
    store.slurm("scontrol", "requeue", slurm_job)
    deadline = time.monotonic() + SLURM_JOB_TIMEOUT
    out = store.work / f"slurm-{slurm_job}.out"
    while b"already completed" not in out.read_bytes():
        assert time.monotonic() < deadline, out.read_bytes()
        time.sleep(POLL)
    store.wait_state(slurm_job, {"COMPLETED"})
    assert (f"portal: requeue: job {job} of Slurm job {slurm_job} already completed: it is not run again "
            f"(portal logs {job})").encode() in out.read_bytes()
    assert len(store.record(job)["runs"]) == 2


def test_a_signal_preempted_batch_job_requeues_itself_and_finishes(store):
    # 100 s of steps: USR1 is due 10 s into each start (50 s before the 1 min limit),
    # delivered at Slurm's next limit check (10-40 s in): no start gets further than
    # 40 s, so the job is preempted at least twice, each start going further.
    steps = {"STEPS": "100", "STEP_SLEEP": "1"}
    slurm_job = store.sbatch(requeue_script("--preempt-signal", "USR1"), "--requeue", "--signal=B:USR1@50",
                             "--time=1", **steps)
    deadline = time.monotonic() + 3 * SLURM_JOB_TIMEOUT
    while True:
        state = store.slurm_state(slurm_job)
        ids = store.ids()
        if ids and store.record(ids[0])["state"] == "completed" and state == "COMPLETED":
            break
        assert state in ACTIVE | {"COMPLETED"}, (state, (store.work / f"slurm-{slurm_job}.out").read_text())
        assert time.monotonic() < deadline, state
        time.sleep(POLL)
    (job,) = store.ids()
    record = store.record(job)
    outcomes = [r["outcome"] for r in record["runs"]]
    assert outcomes[-1] == "completed" and outcomes.count("suspended") >= 2, outcomes
    assert all(r.get("reason", "").startswith("preempted") for r in record["runs"]
               if r["outcome"] == "suspended"), record["runs"]
    # the pause only paces the steps: python's own run of the same steps, unpaced
    assert without_reports(store.portal("logs", job).stdout) == store.python_output(STEPS=steps["STEPS"])


def test_requeue_outside_a_slurm_job_runs_the_program_as_without_it(bare_store):
    env = {k: v for k, v in bare_store.env().items() if not k.startswith("SLURM_")}
    p = subprocess.run([PORTAL_RUN, "--requeue", "train.py"], cwd=bare_store.work, env=env,
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=COMMAND_TIMEOUT)
    assert p.returncode == 0, p.stderr
    assert p.stdout == bare_store.python_output()  # the flag did not take the script as its value
    assert p.stderr == (b"portal: requeue: --requeue: not inside a Slurm batch job (no SLURM_JOB_ID): "
                        b"the program runs as without --requeue\n")
    (job,) = bare_store.ids()
    assert "slurm" not in bare_store.record(job)


def _kill_processes_of(home: Path):
    """SIGKILL of every process started with PORTAL_HOME=home (a node that fails
    takes the job's processes with it); the number killed."""
    marker = b"PORTAL_HOME=" + str(home).encode()
    killed = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        if marker in environ:
            try:
                os.kill(int(name), 9)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


def test_a_node_failure_during_a_resumed_run_resumes_from_the_last_checkpoint(store):
    # Suspended at step 2 (a fake OOM), requeued: the resumed program runs steps
    # 2..; then the node "fails" (every process of the job SIGKILLed) and the job is
    # requeued: its next start resumes the same checkpoint, never step 0 again.
    steps = {"STEPS": "40", "STEP_SLEEP": "0.25"}
    slurm_job = store.sbatch(requeue_script(), PORTAL_FAKE_OOM=TRAIN_OOM, **steps)
    store.wait_state(slurm_job, {"FAILED"})  # exit 75: suspended by the fake OOM
    (job,) = store.ids()
    store.slurm("scontrol", "requeue", slurm_job)
    log = store.home / "jobs" / job / "output.log"
    deadline = time.monotonic() + SLURM_JOB_TIMEOUT
    while b"step 6 " not in log.read_bytes():      # the resumed run is under way
        assert time.monotonic() < deadline, (store.work / f"slurm-{slurm_job}.out").read_text()
        time.sleep(0.1)
    assert store.record(job)["state"] == "running"
    # portal resume and its program (which may die of its supervisor's death first)
    assert _kill_processes_of(store.home) >= 1
    deadline = time.monotonic() + COMMAND_TIMEOUT
    while _kill_processes_of(store.home):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    deadline = time.monotonic() + COMMAND_TIMEOUT
    while store.slurm_state(slurm_job) in {"RUNNING", "COMPLETING"}:
        assert time.monotonic() < deadline
        time.sleep(POLL)
    deadline = time.monotonic() + COMMAND_TIMEOUT
    while True:   # once the killed processes have let go of the job's lock
        shown = store.portal("show", job).stdout.decode()
        if re.search(r"^state +suspended \(recovered from its checkpoint\)", shown, re.M):
            break
        assert time.monotonic() < deadline and re.search(r"^state +running", shown, re.M), shown
        time.sleep(POLL)
    store.slurm("scontrol", "requeue", slurm_job, check=False)   # already requeued by a failed node: fine
    store.wait_state(slurm_job, {"COMPLETED"})
    out = (store.work / f"slurm-{slurm_job}.out").read_text()
    assert "starts anew" not in out, out
    assert store.ids() == [job]
    record = store.record(job)
    assert record["state"] == "completed"
    kinds = [(r["kind"], r.get("outcome")) for r in record["runs"]]
    assert kinds[0] == ("run", "suspended") and kinds[-1] == ("resume", "completed"), kinds
    # the last run went on from the checkpoint (step 2), to python's result
    last = store.portal("logs", job, "--run", str(len(record["runs"]))).stdout
    expected = store.python_output(**steps)
    assert without_reports(last) == expected[expected.index(b"step 2 "):]
