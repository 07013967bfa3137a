"""Data loading, end to end: a training loop `for batch in tqdm(loader)` over a
shuffled map-style DataLoader (0 and 2 worker processes), logging to a file, is
suspended by PORTAL_FAKE_OOM at a chosen step and resumed with `portal resume` in a
new process; the results are those of an uninterrupted python3 run:

  - stdout (every step's batch indices and loss, the sha256 of the final weights)
    and the log file written through `logging` are python's, byte for byte;
  - no batch before the failed one is loaded again: the resumed run calls the
    dataset's __getitem__ exactly for the items of the batches after the failed
    one (getitem.log; the failed batch itself is in the saved loop frame);
  - the progress bar of the resumed epoch continues from its count;
  - the dataset's np.memmap is mapped again from its file, not copied into the
    checkpoint (the checkpoint is smaller than the mapped file).

The program is tests/e2e/data/train.py; see its docstring for its arguments.
"""
import collections
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import PYTHON, RUN_TIMEOUT, base_env

CORPUS = Path(__file__).resolve().parent / "data"
SUSPENDED = 75
STEPS_PER_EPOCH = 8           # 256 items, batches of 32
MAPPED_BYTES = 256 * 1024 * 4  # features.bin
STEP_RE = re.compile(r"^step (\d+) items \[([\d, ]*)\]", re.M)
JOB_RE = re.compile(rb"portal resume (\S+) --mem")


@pytest.fixture(scope="session")
def portal(portal_cli):
    return os.environ.get("PORTAL") or portal_cli


def oom_line():
    lines = (CORPUS / "train.py").read_text().splitlines()
    found = [n for n, text in enumerate(lines, 1) if text.rstrip().endswith("# [oom]")]
    assert len(found) == 1
    return found[0]


def fresh(workdir):
    root = workdir / "data"
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(CORPUS, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def run(cmd, cwd, env):
    return subprocess.run(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=RUN_TIMEOUT)


def calls(root):
    return (root / "getitem.log").read_text().split()


def items_by_step(stdout):
    return {int(step): items.split(", ") for step, items in STEP_RE.findall(stdout.decode())}


CASES = {
    # id: (workers, persistent, rng, epochs, failing step, dropout)
    "w0-default-rng": (0, 0, "default", 2, STEPS_PER_EPOCH + 3, 0.0),
    "w2-persistent-loader-generator": (2, 1, "loader", 3, STEPS_PER_EPOCH + 4, 0.0),
    "w2-sampler-generator": (2, 0, "sampler", 2, 5, 0.0),
    # Torch's default generator drives the next epoch's shuffle and the dropout
    # (its state is saved by the torch_state plug-in).
    "w0-default-rng-dropout-next-epoch": (0, 0, "default", 2, 5, 0.2),
}


@pytest.mark.parametrize("case", list(CASES))
def test_training_loop_resumes_with_the_batches_python_gives(case, tmp_path, portal_run, portal):
    workers, persistent, rng, epochs, fail_at, dropout = CASES[case]
    args = ["train.py", str(workers), str(persistent), rng, str(epochs), str(dropout)]

    root = fresh(tmp_path)
    python = run([PYTHON, *args], root, base_env())
    assert python.returncode == 0, python.stderr.decode()
    python_log = (root / "train.log").read_bytes()
    python_calls = calls(root)
    steps = items_by_step(python.stdout)
    assert len(steps) == epochs * STEPS_PER_EPOCH

    root = fresh(tmp_path)
    home = tmp_path / "home"
    env = base_env({"PORTAL_HOME": str(home), "PORTAL_FAKE_OOM": f"/train.py:{oom_line()}@{fail_at}"})
    first = run([portal_run, *args], root, env)
    assert first.returncode == SUSPENDED, first.stderr.decode(errors="replace")
    assert b"portal: suspended: will continue from the loop at" in first.stderr
    job = JOB_RE.search(first.stderr).group(1).decode()
    size = sum(f.stat().st_size for f in (home / "jobs" / job / "checkpoint").rglob("*") if f.is_file())
    assert size < MAPPED_BYTES, f"checkpoint of {size} bytes: the memmap was copied?"
    before_resume = len(calls(root))

    second = run([portal, "resume", job], tmp_path, base_env({"PORTAL_HOME": str(home)}))
    assert second.returncode == 0, second.stderr.decode(errors="replace")

    assert (first.stdout + second.stdout).decode() == python.stdout.decode()
    assert (root / "train.log").read_bytes() == python_log
    assert b"features memmap r True" in second.stdout

    # The resumed run loaded the items of the steps after the failed one, each
    # once, and nothing of the failed step or of the steps before it.
    resumed_calls = calls(root)[before_resume:]
    later = [i for step in range(fail_at + 1, len(steps) + 1) for i in steps[step]]
    assert collections.Counter(resumed_calls) == collections.Counter(later)
    if workers == 0:  # one process loads in order: exactly python's calls
        assert calls(root)[:before_resume] + resumed_calls == python_calls

    # The bar of the resumed epoch goes on from its count: the resumed run never
    # shows it at 0 (the epochs after it start new bars at 0).
    epoch = (fail_at - 1) // STEPS_PER_EPOCH
    bar = second.stderr.decode(errors="replace").replace("\r", "\n")
    shown = [int(n) for n in re.findall(rf"epoch {epoch}:[^\n]*?(\d+)/{STEPS_PER_EPOCH}", bar)]
    position = (fail_at - 1) % STEPS_PER_EPOCH  # batches of the epoch done before the failed one
    assert shown and min(shown) >= position and max(shown) == STEPS_PER_EPOCH, bar
