"""The checkpoint stream's vocabulary, read out of checkpoints portal-run wrote.

Programs of the idioms corpus (torch under autocast, a DataLoader with workers, a
logging handler and an event writer with its flush thread, a csv reader over an
open file, a package run with -m, an argparse parser) are suspended by a fake
out-of-memory error; every name of Portal's own that each checkpoint's stream
references (read with pickletools: _portal.checkpoint.stream_words.names_in) must be a word
of python/_portal/checkpoint/stream_words.py, and at least one must be there."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import store_env
from test_training import PORTAL_RUN

HERE = Path(__file__).parent / "fidelity_idioms"
PYDIR = os.environ.get("PORTAL_PYDIR")   # the staged _portal package (CTest sets it)
SUSPENDED = 75

PROGRAMS = [
    (["amp_train.py"], "amp_train.py:23@12=cpu", {}),
    (["logged_train.py"], "logged_train.py:31@9=torch", {"EVENT_LOG": "SummaryWriter"}),
    (["csv_stream.py"], "csv_stream.py:38@9=cpu", {}),
    (["workers_train.py"], "workers_train.py:16@20", {}),
    (["-m", "pkg.train"], "pkg/train.py:21@10", {}),
    (["library_identity.py"], "library_identity.py:27@2", {}),
]


@pytest.fixture(scope="module")
def stream_words():
    if not PYDIR:
        pytest.skip("PORTAL_PYDIR (the staged _portal package) is not set; CTest sets it")
    sys.path.insert(0, PYDIR)
    try:
        from _portal.checkpoint import stream_words
    finally:
        sys.path.remove(PYDIR)
    return stream_words


@pytest.mark.parametrize("program, spec, extra", PROGRAMS, ids=[p[1].split("=")[0] for p in PROGRAMS])
def test_a_real_checkpoint_names_only_words(tmp_path, stream_words, program, spec, extra):
    work = tmp_path / "work"
    shutil.copytree(HERE, work)
    home = tmp_path / "home"
    r = subprocess.run([PORTAL_RUN, *program], cwd=work, capture_output=True, timeout=300,
                       env=store_env(home, PORTAL_FAKE_OOM=spec, **extra))
    assert r.returncode == SUSPENDED, r.stderr.decode()
    job = re.search(rb"portal resume (\S+)", r.stderr).group(1).decode()
    state = (home / "jobs" / job / "checkpoint" / "state.pickle").read_bytes()
    names = {n for n in stream_words.names_in(state) if stream_words.is_portal(n[0])}
    assert names, "the checkpoint names none of Portal's rebuild functions"
    unknown = sorted(n for n in names if stream_words.resolve(*n) is None)
    assert not unknown, f"names in {program[-1]}'s checkpoint that are not words: {unknown}"
