"""A rescue short of memory itself (the product page: "a rescue whose checkpoint
fails twice in a row for the same reason ends the job, with the capture's own
message as the error"; issue 4 item 6, its third cause: the writer itself running
out of memory).

Real shortages, under `portal-run --mem SIZE` (the memory tripwire):
- a program whose memory is full of what a function called in the loop holds:
  the rescue clears that frame, and only then has the memory to write the
  checkpoint (a UTF-8 copy of a large string); the job resumes;
- a program whose memory is full of millions of small records it keeps: saving
  them needs a pickler memo larger than all Portal can free, so both tries fail and
  the job ends exactly as python does under the same cap, plus one
  `portal: not rescued:` line, leaving no checkpoint behind (the job's record
  says it failed).

A try that runs out and a second one that fits is the one case not made real: with
everything freed before the first try (the frames inside the loop, cycles, cached
source lines, the reserve), a second try has no more memory than the first unless
the shortage came from elsewhere and went away meanwhile (another thread, another
process), which a test cannot bring about on cue.  That case uses the test-only
fault PORTAL_TEST_FAULT=checkpoint-memory@N (suspend.py), which makes the first N
tries run out of memory half-way through writing state.pickle.
"""
import json
import re
import resource
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import PYTHON, RUN_TIMEOUT, base_env

CORPUS = Path(__file__).resolve().parent / "capture_failure"
SUSPENDED = 75
MiB = 1 << 20
CAP_512M = 256 * MiB  # cap_for(512 MiB): the 256 MiB floor of the reserve taken off
WRITER_OUT_OF_MEMORY = (b"portal: not rescued: its checkpoint could not be written (tried twice): "
                        b"MemoryError\n")
RESUME = re.compile(rb"portal resume (\S+)")


@pytest.fixture
def corpus(tmp_path) -> Path:
    root = tmp_path / "capture_failure"
    shutil.copytree(CORPUS, root)
    return root


def run(cmd, cwd, env=None, data_limit=None) -> subprocess.CompletedProcess:
    def cap():
        resource.setrlimit(resource.RLIMIT_DATA, (data_limit, resource.RLIM_INFINITY))
    return subprocess.run(cmd, cwd=cwd, env=base_env(env), capture_output=True,
                          timeout=RUN_TIMEOUT, preexec_fn=cap if data_limit else None)


def home_of(corpus):
    return {"PORTAL_HOME": str(corpus.parent / "home")}


# The capped runs here need a data segment that is full (untouched zero pages
# count, the rescue's own allocations fail in it): the address cap's, which
# PORTAL_MEMORY_TRIPWIRE=address selects; the resident cap (the default) gives the
# rescue the address space back once it is asked for (memory_watch.hpp).
def capped_home_of(corpus):
    return dict(home_of(corpus), PORTAL_MEMORY_TRIPWIRE="address")


JOB_FILES = {"job.json", "job.lock", "output.log"}


def checkpoint_leftovers(corpus, state="failed"):
    """Anything of a checkpoint in the job store (a checkpoint, a partial one): every
    run is a job, so besides the run's record, lock and log, which must say
    `state`, nothing."""
    jobs = corpus.parent / "home" / "jobs"
    left = []
    for job in sorted(jobs.iterdir()) if jobs.exists() else []:
        assert json.loads((job / "job.json").read_text())["state"] == state
        left += sorted(str(p.relative_to(job)) for p in job.rglob("*") if p.name not in JOB_FILES)
    return left


def test_the_frames_inside_the_loop_are_freed_for_the_checkpoint(corpus, portal_run, portal_cli):
    """The page: "the frames inside it are cleared, so the memory they held is
    free".  Here the checkpoint can be written only with that memory (without the
    clearing both tries run out: checked by hand with _free_inner_frames disabled)."""
    python = run([PYTHON, "held_activations.py"], corpus)
    assert python.returncode == 0, python.stderr.decode()

    capped = run([portal_run, "--mem", "512M", "held_activations.py"], corpus, capped_home_of(corpus))
    err = capped.stderr.decode()
    assert capped.returncode == SUSPENDED, err
    assert re.match(r"portal: suspended: MemoryError at \S*/held_activations.py:11\n", err), err
    assert "will continue from the loop at " in err and "held_activations.py:16 in <module>()" in err
    assert "total" not in capped.stdout.decode(), "the cap did not bind"
    job = RESUME.search(capped.stderr).group(1).decode()

    resumed = run([portal_cli, "resume", job, "--mem", "8G"], corpus, home_of(corpus))
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert resumed.stderr == b""
    assert capped.stdout + resumed.stdout == python.stdout


def test_a_writer_out_of_memory_twice_ends_the_job_as_python_would(corpus, portal_run):
    """Both tries run out inside the pickler.  That the rescue gets as far as the
    writer at all is the reserve's doing: without it, importing the writer's modules
    already failed ("the rescue itself failed: ... failed to map segment from shared
    object"), and before the rescue caught its own errors, a MemoryError from inside
    Portal replaced the program's."""
    # python with the cap portal-run --mem 512M sets: the same error at the same
    # line (a few records more or fewer: Portal's own memory differs).
    python = run([PYTHON, "many_records.py"], corpus, data_limit=CAP_512M)
    assert python.returncode == 1, python.stderr.decode()
    assert python.stderr.startswith(b"Traceback (most recent call last):\n")
    # The caret line is the interpreter's: 3.11 draws one under `bytes(16 << 20)`; 3.13
    # leaves it out where the call is the whole right-hand side of an assignment.
    assert re.search(rb"\n    scratch = bytes\(16 << 20\)\n(              \^{15}\n)?MemoryError\n\Z",
                     python.stderr), python.stderr

    capped = run([portal_run, "--mem", "512M", "many_records.py"], corpus, capped_home_of(corpus))
    assert capped.returncode == python.returncode, capped.stderr.decode()
    assert capped.stdout == python.stdout == b""
    assert capped.stderr == python.stderr + WRITER_OUT_OF_MEMORY, capped.stderr.decode()
    assert checkpoint_leftovers(corpus) == []


def test_a_try_that_runs_out_is_tried_again(corpus, portal_run, portal_cli):
    python = run([PYTHON, "loop.py"], corpus)
    env = dict(home_of(corpus), PORTAL_FAKE_OOM="loop.py:3@3",
               PORTAL_TEST_FAULT="checkpoint-memory@1")
    first = run([portal_run, "loop.py"], corpus, env)
    assert first.returncode == SUSPENDED, first.stderr.decode()
    job = RESUME.search(first.stderr).group(1).decode()
    # The failed try left nothing: one checkpoint, the first generation.
    assert checkpoint_leftovers(corpus, "suspended") == [
        "checkpoint", "checkpoint.1", "checkpoint.1/manifest.json", "checkpoint.1/state.pickle"]

    resumed = run([portal_cli, "resume", job], corpus, home_of(corpus))
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert first.stdout + resumed.stdout == python.stdout


def test_the_fault_on_both_tries_ends_the_job(corpus, portal_run):
    """The counterpart of the test above: the fault does fire, on each try."""
    env = dict(home_of(corpus), PORTAL_FAKE_OOM="loop.py:3@3",
               PORTAL_TEST_FAULT="checkpoint-memory@2")
    r = run([portal_run, "loop.py"], corpus, env)
    assert r.returncode == 1
    assert r.stdout == b"i 0 0\ni 1 1\n"
    assert r.stderr.startswith(b"Traceback (most recent call last):\n")
    assert r.stderr.endswith(b"\nMemoryError\n" + WRITER_OUT_OF_MEMORY), r.stderr.decode()
    assert checkpoint_leftovers(corpus) == []
