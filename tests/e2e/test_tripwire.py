"""The memory tripwire, end to end: under `portal-run --mem SIZE` the interpreter's
data segment is capped (RLIMIT_DATA, docs/architecture.md "The memory tripwire"), so
a program whose memory grows runs out inside Python - a MemoryError, or torch's
"can't allocate memory" RuntimeError - and is suspended (exit 75) instead of being
killed; `portal resume JOB --mem 8G` then finishes it, with python's output.

The programs (tripwire/) allocate lazily mapped zero pages, which the cap counts
and the machine barely does: a 3 GiB round costs no 3 GiB of RAM.
"""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import PYTHON, RUN_TIMEOUT, base_env

CORPUS = Path(__file__).resolve().parent / "tripwire"
SUSPENDED = 75
GiB = 1 << 30
MiB = 1 << 20
# cap_for(2 GiB): the reserve is 10%, raised to its 256 MiB floor.
CAP_2G = 2 * GiB - 256 * MiB
OUT_OF_MEMORY = re.compile(
    rb"\Aportal: suspended: (\S*MemoryError\b|RuntimeError: .*can't allocate memory)")
RESUME = re.compile(rb"portal resume (\S+) --mem")


@pytest.fixture
def corpus(tmp_path) -> Path:
    root = tmp_path / "tripwire"
    shutil.copytree(CORPUS, root)
    return root


def run(cmd, cwd, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=base_env(env), capture_output=True,
                          timeout=RUN_TIMEOUT)


def importable(module: str) -> bool:
    return run([PYTHON, "-c", f"import {module}"], "/").returncode == 0


@pytest.mark.parametrize("script,needs", [("grow_numpy.py", "numpy"),
                                          ("grow_bytes.py", ""),
                                          ("grow_torch.py", "torch")])
def test_runs_out_under_the_cap_and_resumes(script, needs, corpus, tmp_path,
                                            portal_run, portal_cli):
    if needs and not importable(needs):
        pytest.skip(f"{needs} is not installed")
    python = run([PYTHON, script], corpus)
    assert python.returncode == 0, python.stderr.decode()

    home = {"PORTAL_HOME": str(tmp_path / "home")}
    capped = run([portal_run, "--mem", "2G", script], corpus, home)
    err = capped.stderr.decode(errors="replace")
    assert capped.returncode == SUSPENDED, err
    assert OUT_OF_MEMORY.search(capped.stderr), err
    assert "round 6" not in capped.stdout.decode(), "the cap did not bind"
    job = RESUME.search(capped.stderr).group(1).decode()

    resumed = run([portal_cli, "resume", job, "--mem", "8G"], tmp_path, home)
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert resumed.stderr == b""
    assert capped.stdout + resumed.stdout == python.stdout


def test_the_cap_is_the_requested_size_less_the_reserve(corpus, portal_run):
    show = "import resource; print(resource.getrlimit(resource.RLIMIT_DATA)[0])"
    capped = run([portal_run, "--mem", "2G", "-c", show], corpus, {"PORTAL_LOG": "debug"})
    assert capped.returncode == 0, capped.stderr.decode()
    assert int(capped.stdout) == CAP_2G
    assert f"portal: memory tripwire: data limit 1.8 GiB ({CAP_2G} bytes)".encode() in capped.stderr

    uncapped = run([portal_run, "--mem", "2G", "-c", show], corpus,
                   {"PORTAL_MEMORY_TRIPWIRE": "0"})
    assert int(uncapped.stdout) == int(run([PYTHON, "-c", show], corpus).stdout)


def test_switched_off_the_program_gets_what_it_asks(corpus, portal_run):
    off = run([portal_run, "--mem", "2G", "big.py"], corpus, {"PORTAL_MEMORY_TRIPWIRE": "0"})
    assert (off.returncode, off.stdout, off.stderr) == (0, b"allocated 3072 MiB\n", b"")

    # Capped, outside any loop: nothing to resume, python's own MemoryError, then
    # Portal's one line saying why it was not rescued.
    on = run([portal_run, "--mem", "2G", "big.py"], corpus)
    assert on.returncode == 1
    assert on.stderr.endswith(b"\nMemoryError\nportal: not rescued: it was raised outside any "
                              b"loop of the program's own code: there is no iteration to retry\n"), \
        on.stderr.decode()


def test_a_size_that_is_not_one_is_a_usage_error(corpus, portal_run):
    bad = run([portal_run, "--mem", "2X", "big.py"], corpus)
    assert bad.returncode == 2
    assert b"--mem" in bad.stderr and b"not a size" in bad.stderr
