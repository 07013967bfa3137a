"""PyTorch training, end to end: a training script (torch/train_mlp.py: Adam, a
LambdaLR schedule with a lambda, dropout, gradient accumulation, a forward hook)
runs under portal-run, is suspended by a fake out-of-memory error of torch's own
kind (`torch`: torch.cuda.OutOfMemoryError) and of the CPU allocator's (`cpu`), is
resumed by `portal resume JOB` in a new process, as many times as it suspends,
and ends with python's output: the same loss curve, line for line, and the same
sha256 of every state_dict tensor's bytes (model and optimizer), bit for bit.

A tensor whose autograd graph could still be back-propagated is never cut
(torch/live_graph.py): the job is not rescued, the error goes on as in python, and
Portal's message names the variable; one whose graph backward() has consumed (a
hidden state carried across batches, torch/tbptt.py) is saved as a leaf.
"""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import PYTHON, RUN_TIMEOUT, base_env

CORPUS = Path(__file__).resolve().parent / "torch"
SUSPENDED = 75
JOB_RE = re.compile(rb"^portal: suspended: job (\S+),", re.M)

if subprocess.run([PYTHON, "-c", "import torch"], capture_output=True).returncode:
    pytest.skip("torch is not installed for /usr/bin/python3", allow_module_level=True)


def line_of(script, marker):
    lines = (CORPUS / script).read_text().splitlines()
    found = [n for n, text in enumerate(lines, 1) if text.rstrip().endswith(f"# [{marker}]")]
    assert len(found) == 1, (script, marker, found)
    return found[0]


def run(cmd, cwd, env):
    return subprocess.run(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=RUN_TIMEOUT)


@pytest.fixture(scope="module")
def python_run(tmp_path_factory):
    """python's own run of the training script (once: it is the same for every case)."""
    root = tmp_path_factory.mktemp("python") / "torch"
    shutil.copytree(CORPUS, root, ignore=shutil.ignore_patterns("__pycache__"))
    python = run([PYTHON, "train_mlp.py"], root, base_env())
    assert python.returncode == 0, python.stderr.decode()
    return python


@pytest.fixture
def corpus(tmp_path):
    root = tmp_path / "torch"
    shutil.copytree(CORPUS, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def curve_and_digest(stdout):
    lines = stdout.decode().splitlines()
    curve = [line for line in lines if " loss " in line or " eval " in line]
    digest = [line for line in lines if line.startswith("state sha256 ")]
    return curve, digest


# (marker, hit, kind) of each fake error, in the order they fire, and the error text
# each suspension report starts with.
CASES = {
    "torch-in-loop": [("forward", 8, "torch", "torch.cuda.OutOfMemoryError: CUDA out of memory")],
    # two suspensions; the second inside MLP.forward (a frame below the loop's)
    "torch-then-cpu-in-forward": [("forward", 5, "torch", "torch.cuda.OutOfMemoryError"),
                                  ("fc1", 27, "cpu", "RuntimeError: [enforce fail at alloc_cpu.cpp")],
}


# An error in backward(): the failed iteration's forward pass already drew dropout's
# random numbers (and ran the hook) when the state is saved; run again, the
# iteration draws other ones.  A known gap: what an iteration did before the error
# is not undone (docs/torch.md, "Known gaps").
CASES["cpu-in-backward"] = [("backward", 10, "cpu", "RuntimeError: [enforce fail at alloc_cpu.cpp")]
KNOWN_GAP = pytest.mark.xfail(strict=True, reason="an iteration's RNG draws before the error are "
                              "not undone (docs/torch.md, Known gaps)")


@pytest.mark.parametrize("case", [pytest.param(c, marks=KNOWN_GAP) if c == "cpu-in-backward"
                                  else c for c in sorted(CASES)])
def test_training_resumes_bit_for_bit(case, python_run, corpus, tmp_path, portal_run,
                                      portal_cli):
    stops = CASES[case]
    python = python_run
    curve, digest = curve_and_digest(python.stdout)
    assert len(curve) == 3 * 12 + 3 and len(digest) == 1

    home = {"PORTAL_HOME": str(tmp_path / "home")}
    fake = ",".join(f"/train_mlp.py:{line_of('train_mlp.py', m)}@{hit}={kind}"
                    for m, hit, kind, _ in stops)
    p = run([portal_run, "train_mlp.py"], corpus, base_env(dict(home, PORTAL_FAKE_OOM=fake)))
    runs = [p]
    for _, _, _, error in stops:
        last = runs[-1]
        err = last.stderr.decode(errors="replace")
        assert last.returncode == SUSPENDED, err
        assert err.startswith(f"portal: suspended: {error}"), err
        assert "will continue from the loop at " in err and " in train()" in err, err
        job = JOB_RE.search(last.stderr).group(1).decode()
        # a new process, elsewhere, without the fixture's variable: the job brings its own
        runs.append(run([portal_cli, "resume", job], tmp_path, base_env(home)))
    final = runs[-1]
    assert final.returncode == 0, final.stderr.decode()
    assert final.stderr == b""
    stdout = b"".join(r.stdout for r in runs)
    assert curve_and_digest(stdout) == (curve, digest)
    assert stdout == python.stdout                      # hook counts too


def test_carried_hidden_state_resumes_bit_for_bit(corpus, tmp_path, portal_run, portal_cli):
    """torch/tbptt.py: the GRU's hidden state, carried across batches, holds the
    previous batch's graph, consumed by its backward(): saved as a leaf."""
    python = run([PYTHON, "tbptt.py"], corpus, base_env())
    assert python.returncode == 0, python.stderr.decode()
    home = {"PORTAL_HOME": str(tmp_path / "home")}
    fake = f"/tbptt.py:{line_of('tbptt.py', 'detach')}@6=cpu"
    p = run([portal_run, "tbptt.py"], corpus, base_env(dict(home, PORTAL_FAKE_OOM=fake)))
    err = p.stderr.decode(errors="replace")
    assert p.returncode == SUSPENDED, err
    assert "in <module>(), iteration 6;" in err, err
    job = JOB_RE.search(p.stderr).group(1).decode()
    resumed = run([portal_cli, "resume", job], tmp_path, base_env(home))
    assert resumed.returncode == 0 and resumed.stderr == b"", resumed.stderr.decode()
    assert p.stdout + resumed.stdout == python.stdout
    assert b"state sha256 " in resumed.stdout


def test_live_graph_is_not_cut(corpus, tmp_path, portal_run):
    python = run([PYTHON, "live_graph.py"], corpus, base_env())
    assert python.returncode == 0, python.stderr.decode()
    fake = f"/live_graph.py:{line_of('live_graph.py', 'accumulate')}@3=cpu"
    p = run([portal_run, "live_graph.py"], corpus,
            base_env({"PORTAL_HOME": str(tmp_path / "home"), "PORTAL_FAKE_OOM": fake}))
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 1 and p.stdout == b"", err
    assert "DefaultCPUAllocator: can't allocate memory" in err
    assert re.search(r"^portal: not rescued: .*global 'total' \(torch\.Tensor\): tensor is part "
                     r"of a live autograd graph \(grad_fn=AddBackward0\)", err, re.M), err
