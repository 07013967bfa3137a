"""Library submodules the program reaches as attributes of their package
(`import torch.utils.checkpoint` ... `torch.utils.checkpoint.checkpoint(...)`)
still are after a resume (python/_portal/state/submodules.py): suspended by a fake
out-of-memory error, resumed in a new process, the output is python's."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import store_env
from test_training import PORTAL, PORTAL_RUN, PYTHON

HERE = Path(__file__).parent / "submodules"
SUSPENDED = 75


@pytest.mark.parametrize("script, spec", [("xml_loop.py", "xml_loop.py:9@6"),
                                          ("checkpointed.py", "checkpointed.py:13@4=torch")])
def test_a_submodule_reached_through_its_package_is_there_after_a_resume(tmp_path, script, spec):
    work = tmp_path / "work"
    shutil.copytree(HERE, work)
    python = subprocess.run([PYTHON, script], cwd=work, capture_output=True, timeout=300)
    assert python.returncode == 0, python.stderr.decode()
    home = tmp_path / "home"
    first = subprocess.run([PORTAL_RUN, script], cwd=work, capture_output=True, timeout=300,
                           env=store_env(home, PORTAL_FAKE_OOM=spec))
    assert first.returncode == SUSPENDED, first.stderr.decode()
    job = re.search(rb"portal resume (\S+)", first.stderr).group(1).decode()
    second = subprocess.run([PORTAL, "resume", job], cwd=work, capture_output=True, timeout=300,
                            env=store_env(home))
    assert second.returncode == 0, second.stderr.decode()
    assert first.stdout + second.stdout == python.stdout
