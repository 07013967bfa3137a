"""Sparse state costs nothing (issue 14, item 2): a program with two untouched
3 GiB np.zeros arrays suspends on a (fake) out-of-memory error with a checkpoint
whose files hold only the touched bytes (holes elsewhere: `du` is small, the
recorded sizes are the whole arrays), and `portal resume` continues it to the
same output as python's, without reading or allocating the zero pages.

Sizes: 2 x 3 GiB of address space, a few MiB touched: it fits this 24 GiB
machine shared by several test runs (nothing of the 6 GiB is ever resident).
"""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import PYTHON, base_env

CORPUS = Path(__file__).resolve().parent / "sparse"
SCRIPT = "untouched_zeros.py"
TIMEOUT = 600                    # seconds per run: a loaded 2-core machine
GIB, MIB = 1 << 30, 1 << 20
ARRAYS_BYTES = 2 * 3 * GIB
# what the checkpoint may occupy on disk: the 8 MiB of real data, the touched
# pages, state.pickle and the manifest, with room for the filesystem's blocks
MAX_STORED = 32 * MIB
# peak memory of the resumed process beyond python's run of the same program
MAX_EXTRA_PEAK = 512 * MIB


def line_of(marker):
    for n, line in enumerate((CORPUS / SCRIPT).read_text().splitlines(), 1):
        if marker in line:
            return n
    raise AssertionError(f"no {marker!r} in {SCRIPT}")


def run(cmd, cwd, env):
    return subprocess.run(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=TIMEOUT)


def peak(stderr):
    m = re.search(rb"^peak_kib (\d+)$", stderr, re.M)
    assert m, stderr.decode(errors="replace")[-2000:]
    return int(m.group(1)) * 1024


def stored_bytes(directory):
    """Bytes the files under ``directory`` occupy on disk (their blocks)."""
    total = 0
    for root, _, names in os.walk(directory):
        for name in names:
            total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


@pytest.fixture(scope="module")
def outcome(tmp_path_factory, portal_run, portal_cli):
    work = tmp_path_factory.mktemp("sparse")
    root = work / "prog"
    shutil.copytree(CORPUS, root)
    python = run([PYTHON, SCRIPT], root, base_env())
    home = work / "home"
    env = base_env({"PORTAL_HOME": str(home),
                    "PORTAL_FAKE_OOM": f"{SCRIPT}:{line_of('FAKE-OOM here')}@3"})
    suspended = run([portal_run, SCRIPT], root, env)
    jobs = re.findall(rb"^portal: suspended: job (\S+),", suspended.stderr, re.M)
    checkpoint = None
    if jobs:
        job = jobs[0].decode()
        checkpoint = os.path.realpath(home / "jobs" / job / "checkpoint")
        stored = stored_bytes(checkpoint)
        with open(os.path.join(checkpoint, "manifest.json")) as f:
            manifest = json.load(f)
        resumed = run([portal_cli, "resume", job], work, base_env({"PORTAL_HOME": str(home)}))
    else:
        stored = manifest = resumed = None
    return python, suspended, stored, manifest, resumed


def test_python_runs_it_to_completion(outcome):
    python = outcome[0]
    assert python.returncode == 0, python.stderr.decode(errors="replace")[-2000:]


def test_suspended_with_a_checkpoint_of_the_touched_bytes_only(outcome):
    _, suspended, stored, manifest, _ = outcome
    assert suspended.returncode == 75, suspended.stderr.decode(errors="replace")[-3000:]
    logical = sum(rec["size"] for rel, rec in manifest["files"].items()
                  if rel.startswith("blobs/"))
    assert logical >= ARRAYS_BYTES                  # the whole arrays, as holes
    assert stored <= MAX_STORED, f"the checkpoint occupies {stored / MIB:.1f} MiB on disk"


def test_resumed_bit_for_bit_without_allocating_the_zeros(outcome):
    python, _, _, _, resumed = outcome
    assert resumed is not None and resumed.returncode == 0, \
        resumed.stderr.decode(errors="replace")[-3000:]
    assert resumed.stdout == python.stdout
    assert peak(resumed.stderr) <= peak(python.stderr) + MAX_EXTRA_PEAK
