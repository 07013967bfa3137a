"""PyTorch training, end to end: a training script (torch/train_mlp.py: Adam, a
LambdaLR schedule with a lambda, dropout, gradient accumulation, a forward hook)
runs under portal-run, is suspended by a fake out-of-memory error of torch's own
kind (`torch`: torch's OutOfMemoryError, under the name its version prints) and of the CPU allocator's (`cpu`), is
resumed by `portal resume JOB` in a new process, as many times as it suspends,
and ends with python's output: the same loss curve, line for line, and the same
sha256 of every state_dict tensor's bytes (model and optimizer), bit for bit.
(Autograd graphs, live and consumed, and other training scripts are tested in
test_training.py.)
"""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import PYTHON, RUN_TIMEOUT, base_env, torch_oom_name

CORPUS = Path(__file__).resolve().parent / "torch"
SUSPENDED = 75
JOB_RE = re.compile(rb"^portal: suspended: job (\S+),", re.M)

if subprocess.run([PYTHON, "-c", "import torch"], capture_output=True).returncode:
    pytest.skip(f"torch is not installed for {PYTHON}", allow_module_level=True)


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
    "torch-in-loop": [("forward", 8, "torch", f"{torch_oom_name()}: CUDA out of memory")],
    # two suspensions; the second inside MLP.forward (a frame below the loop's)
    "torch-then-cpu-in-forward": [("forward", 5, "torch", torch_oom_name()),
                                  ("fc1", 27, "cpu", "RuntimeError: [enforce fail at alloc_cpu.cpp")],
}


# An error in backward(): the failed iteration's forward pass already ran the hook
# that counts calls when the state is saved, so the count ends one higher - the
# product page's "side effects happen twice".  (Dropout's random draws are rolled
# back since the loop calls backward(): iteration.py; test_training.py's
# cnn_train backward case resumes bit for bit.)
CASES["cpu-in-backward"] = [("backward", 10, "cpu", "RuntimeError: [enforce fail at alloc_cpu.cpp")]
KNOWN_GAP = pytest.mark.xfail(strict=True, reason="the failed iteration's forward hook ran once "
                              "more: its side effects happen twice (docs/torch.md, Known gaps)")


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
