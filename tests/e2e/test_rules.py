"""The product page's rules that are not suspensions: the oom policy, and the
`portal: not rescued:` line that follows python's own traceback when an
out-of-memory error ends the program (inside an optimizer step, outside any
loop, with the policy off)."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).parent / "rules"
PORTAL_RUN = os.environ.get("PORTAL_RUN") or shutil.which("portal-run")
PORTAL = os.environ.get("PORTAL") or str(Path(PORTAL_RUN).with_name("portal"))
SGD_STEP_LINE = 127  # `loss = None`, the first statement of torch.optim.SGD.step (torch 1.13)


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
    d = cwd.parent / "home" / "jobs"
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


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
    assert r.returncode == 2 and b"supported: oom.on=true|false" in r.stderr


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
    import importlib.util
    sgd = Path(importlib.util.find_spec("torch.optim.sgd").origin)
    assert sgd.read_text().splitlines()[SGD_STEP_LINE - 1].strip() == "loss = None"
    r = run([PORTAL_RUN, "train_sgd.py"], corpus,
            PORTAL_FAKE_OOM=f"torch/optim/sgd.py:{SGD_STEP_LINE}@3")
    assert r.returncode == 1, r.stderr
    assert r.stdout.count(b"step ") == 2
    assert python_traceback_of_memory_error(r.stderr), r.stderr
    assert f'sgd.py", line {SGD_STEP_LINE}, in step'.encode() in r.stderr
    last = r.stderr.decode().splitlines()[-1]
    assert last.startswith("portal: not rescued: raised inside an optimizer step (")
    assert last.endswith("the weights may be half updated")
    assert jobs(corpus) == []
