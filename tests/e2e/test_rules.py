"""The product page's rules that are not suspensions: the oom policy, and the
`portal: not rescued:` line that follows python's own traceback when an
out-of-memory error ends the program (inside an optimizer step, outside any
loop, with the policy off)."""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import line_in_function, origin_of, sgd_step_start

HERE = Path(__file__).parent / "rules"
PORTAL_RUN = os.environ.get("PORTAL_RUN") or shutil.which("portal-run")
PORTAL = os.environ.get("PORTAL") or str(Path(PORTAL_RUN).with_name("portal"))


@pytest.fixture
def corpus(tmp_path):
    shutil.copytree(HERE, tmp_path / "rules")
    return tmp_path / "rules"


def run(cmd, cwd, **env):
    full = dict(os.environ, PORTAL_HOME=str(cwd.parent / "home"), **env)
    if "PORTAL_POLICY" not in env:
        full.pop("PORTAL_POLICY", None)
    return subprocess.run(cmd, cwd=cwd, capture_output=True, env=full, timeout=120)


def jobs(cwd):
    """The jobs left with a checkpoint: every run is a job (docs/job-store.md), but
    one that was not rescued must end failed, with nothing to resume."""
    d = cwd.parent / "home" / "jobs"
    found = []
    for p in sorted(d.iterdir()) if d.exists() else []:
        record = json.loads((p / "job.json").read_text())
        if any(c.name.startswith(("checkpoint", ".checkpoint")) for c in p.iterdir()):
            found.append(p.name)
        else:
            assert record["state"] in ("failed", "completed"), record
    return found


def python_traceback_of_memory_error(text):
    return text.startswith(b"Traceback (most recent call last):\n") and b"\nMemoryError\n" in text


@pytest.mark.parametrize("how", ["option", "environment"])
def test_policy_off_fails_at_once(corpus, how):
    args, env = ([PORTAL_RUN, "--policy", "oom.on=false", "loop.py"], {}) if how == "option" else \
        ([PORTAL_RUN, "loop.py"], {"PORTAL_POLICY": "oom.on=false"})
    r = run(args, corpus, PORTAL_FAKE_OOM="loop.py:3@3", **env)
    assert r.returncode == 1
    assert r.stdout == b"i 0 0\ni 1 1\n"
    assert python_traceback_of_memory_error(r.stderr), r.stderr
    assert r.stderr.endswith(b"\nMemoryError\nportal: not rescued: the oom policy is off "
                             b"(--policy oom.on=false): the job fails at once\n"), r.stderr
    assert jobs(corpus) == []


def test_a_bad_policy_is_a_usage_error(corpus):
    r = run([PORTAL_RUN, "--policy", "oom.on=maybe", "loop.py"], corpus)
    assert r.returncode == 2 and r.stdout == b""
    assert r.stderr.startswith(b"portal: policy: 'oom.on=maybe'"), r.stderr
    r = run([PORTAL_RUN, "--policy", "gpu.fast=true", "loop.py"], corpus)
    assert r.returncode == 2 and (b"supported: oom.action=suspend|retry|skip, oom.exact=true|false, "
                                  b"oom.max_skips=N, oom.on=true|false, oom.retries=N") in r.stderr


def test_policy_is_kept_on_resume_unless_given_again(corpus):
    spec = "loop.py:3@2,loop.py:3@4,loop.py:3@6"
    first = run([PORTAL_RUN, "loop.py"], corpus, PORTAL_FAKE_OOM=spec)
    assert first.returncode == 75, first.stderr
    job = re.search(rb"portal resume (\S+)", first.stderr).group(1).decode()
    # The job's own policy (on) is kept: it suspends again at the second spec.
    second = run([PORTAL, "resume", job], corpus)
    assert second.returncode == 75, second.stderr
    # Given again, off: the third spec fails the job at once.
    third = run([PORTAL, "resume", job, "--policy", "oom.on=false"], corpus)
    assert third.returncode == 1, third.stderr
    assert third.stderr.endswith(b"portal: not rescued: the oom policy is off "
                                 b"(--policy oom.on=false): the job fails at once\n")
    # A re-run iteration counts as a new start of the line: hits 2 (i=1), 4 (i=2),
    # 6 (i=3).
    assert first.stdout + second.stdout + third.stdout == b"i 0 0\ni 1 1\ni 2 3\n"


def test_inside_an_optimizer_step_is_not_rescued(corpus):
    _, step_line = sgd_step_start()   # `loss = None`, in the interpreter's own torch
    r = run([PORTAL_RUN, "train_sgd.py"], corpus,
            PORTAL_FAKE_OOM=f"torch/optim/sgd.py:{step_line}@3")
    assert r.returncode == 1, r.stderr
    assert r.stdout.count(b"step ") == 2
    assert python_traceback_of_memory_error(r.stderr), r.stderr
    assert f'sgd.py", line {step_line}, in step'.encode() in r.stderr
    last = r.stderr.decode().splitlines()[-1]
    assert last.startswith("portal: not rescued: raised inside an optimizer step (")
    assert last.endswith("the weights may be half updated")
    assert jobs(corpus) == []


# --- a capture that fails ----------------------------------------------------------------

JOB_FILES = {"job.json", "job.lock", "output.log"}


def checkpoint_leftovers(home):
    """Anything of a checkpoint under the job store (a checkpoint, a partial one):
    only the run's job record, lock and log may be there, its record saying failed."""
    jobs_dir = home / "jobs"
    left = []
    for job in sorted(jobs_dir.iterdir()) if jobs_dir.exists() else []:
        assert json.loads((job / "job.json").read_text())["state"] == "failed"
        left += [str(p.relative_to(home)) for p in job.rglob("*") if p.name not in JOB_FILES]
    return left


def test_an_unsaveable_object_ends_the_job_naming_it(corpus):
    r = run([PORTAL_RUN, "holds_socket.py"], corpus, PORTAL_FAKE_OOM="holds_socket.py:6@2")
    assert r.returncode == 1
    assert r.stdout == b"i 0\n"
    assert python_traceback_of_memory_error(r.stderr), r.stderr
    # found by decide.py's trial before anything is freed or written (issue 11): the
    # loop declines, not tried twice (the same object would fail again), what to do
    # is said, and with no loop further out the job ends
    assert r.stderr.decode().splitlines()[-1] == (
        "portal: not rescued: its state holds global 'sock' (socket.socket): cannot pickle "
        "'socket' object; Portal cannot save it: close or drop it before the loop, keep it out "
        "of the loop's state, or give its class __getstate__/__setstate__ that leave it out "
        "and make it again")
    assert checkpoint_leftovers(corpus.parent / "home") == []


def test_a_full_disk_ends_the_job_leaving_no_partial_checkpoint(corpus, tmp_path):
    home = tmp_path / "small-disk"
    home.mkdir()
    # mode=0700: a store of the user's own (a tmpfs root is 1777, which the store rule refuses)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(home)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a 4 MiB tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        r = subprocess.run([PORTAL_RUN, "big_state.py"], cwd=corpus, capture_output=True, timeout=120,
                           env=dict(os.environ, PORTAL_HOME=str(home),
                                    PORTAL_FAKE_OOM="big_state.py:5@2"))
        assert r.returncode == 1, r.stderr
        assert r.stdout == b"i 0 1.0\n"
        last = r.stderr.decode().splitlines()[-1]
        assert last.startswith("portal: not rescued: its checkpoint could not be written (tried twice): ")
        assert "No space left on device" in last, last
        assert checkpoint_leftovers(home) == []
    finally:
        subprocess.run(["umount", str(home)], capture_output=True)


# --- portal resume's requirements on this machine ---------------------------------------------

def suspended_job(corpus):
    r = run([PORTAL_RUN, "loop.py"], corpus, PORTAL_FAKE_OOM="loop.py:3@2")
    assert r.returncode == 75, r.stderr
    return re.search(rb"portal resume (\S+)", r.stderr).group(1).decode()


# A --mem this machine does not have is a usage error (2), worded as portal-run's
# (options.hpp); the other requirements are refusals of the job here (1).
@pytest.mark.parametrize("options,status,says", [
    (["--mem", "100000"], 2, b"portal: --mem 100000: this machine has "),
    (["--gpu", "A100"], 1, b"portal: resume: --gpu A100: this machine has"),
    # A place Portal does not know is a usage error, worded exactly (docs/slurm.md).
    (["--on", "cluster-7"], 2, b"portal: resume: --on cluster-7: not supported (local, slurm[:PARTITION])\n"),
])
def test_a_refused_resume_leaves_the_job_suspended(corpus, options, status, says):
    job = suspended_job(corpus)
    refused = run([PORTAL, "resume", job, *options], corpus)
    assert refused.returncode == status and refused.stdout == b""
    assert refused.stderr.startswith(says), refused.stderr
    if options[0] != "--on":
        assert b"stays suspended" in refused.stderr
    # Intact: it resumes here, from the iteration that failed.
    done = run([PORTAL, "resume", job], corpus)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"i 1 1\ni 2 3\ni 3 6\ni 4 10\ni 5 15\ntotal 15\n"


def test_inside_a_library_loop_called_at_top_level_is_not_rescued(corpus):
    encoder = origin_of("json.encoder")   # the interpreter's own json
    # `if first:`, the first statement of _iterencode_list's `for value in lst:` (line 298
    # in 3.11 and 3.13; 3.14: `if i:` of `for i, value in enumerate(lst):`, line 299);
    # library_loop.py calls json.dump, which runs that Python loop (json.dumps runs the
    # C encoder in 3.13, with an indent too)
    source = encoder.read_text().splitlines()
    header, first = (("for i, value in enumerate(lst):", "if i:")
                     if any(line.strip() == "for i, value in enumerate(lst):" for line in source)
                     else ("for value in lst:", "if first:"))
    JSON_LIST_LOOP_LINE = line_in_function(encoder, "def _iterencode_list(", header) + 1
    assert source[JSON_LIST_LOOP_LINE - 1].strip() == first
    r = run([PORTAL_RUN, "library_loop.py"], corpus,
            PORTAL_FAKE_OOM=f"json/encoder.py:{JSON_LIST_LOOP_LINE}@5")
    assert r.returncode == 1, r.stderr
    assert r.stdout == b"encoding\n"
    assert python_traceback_of_memory_error(r.stderr), r.stderr
    assert f'encoder.py", line {JSON_LIST_LOOP_LINE}, in _iterencode_list'.encode() in r.stderr
    assert r.stderr.decode().splitlines()[-1] == (
        f"portal: not rescued: it was raised outside the program's own code "
        f"({encoder}:{JSON_LIST_LOOP_LINE}), with no loop of the program's on its way: "
        f"there is no point of its own to continue from")
    assert jobs(corpus) == []
