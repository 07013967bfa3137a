"""CPython's own test of sys.settrace, run with its code instrumented by Portal.

test.test_sys_settrace (Debian's libpython3.11-testsuite) checks the exact event
stream a trace function sees, loops left by exceptions and tight loops included
(test_11_tightloop, test_12_tighterloop).  A copy of it is run as the program's
own code, once as the script itself (instrumented by portal-run's compile of the
main script) and once imported by a small script beside it (instrumented by the
import hook), under /usr/bin/python3 and under portal-run: every case must get the
verdict it gets under python, and the copy must really have been instrumented.
"""
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import PYTHON, base_env

SUITE = Path(sysconfig.get_path("stdlib")) / "test" / "test_sys_settrace.py"

# Imports the copy (the user's own module: the import hook instruments it), says
# whether its code carries Portal's loop handlers, and runs its cases.
RUNNER = """\
import sys
import unittest

import test_sys_settrace as suite

names = suite.tightloop_example.__code__.co_names
print("instrumented", "__portal_rescue__" in names, flush=True)
unittest.main(module=suite, argv=[sys.argv[0], "-v"])
"""

VERDICT = re.compile(r"^(test\w+) \(([\w.]+)\)\s*(?:\n[^\n]*?)?\.\.\. (ok|FAIL|ERROR|skipped\b.*|"
                     r"expected failure|unexpected success)$", re.M)
TIGHT_LOOPS = ("test_11_tightloop", "test_12_tighterloop")
MIN_CASES = 250  # 293 cases in 3.11.2's module


def verdicts(output: str):
    """{"Class.test": verdict} from unittest's -v report ("test (module.Class.test)",
    a docstring's first line maybe, "... verdict")."""
    found = {}
    for _, where, verdict in VERDICT.findall(output):
        key = where.split(".", 1)[1]
        assert key not in found, f"{key} reported twice"
        found[key] = "skipped" if verdict.startswith("skipped") else verdict
    return found


def run(launcher, workdir: Path, args):
    return subprocess.run([launcher, *args], cwd=workdir, env=base_env(), capture_output=True,
                          text=True, timeout=120)


@pytest.mark.skipif(not SUITE.exists(), reason=f"{SUITE} is not installed (Debian's "
                    f"libpython{sys.version_info[0]}.{sys.version_info[1]}-testsuite package; "
                    f"scripts/setup.sh installs it)")
@pytest.mark.parametrize("how", ["as_script", "imported"])
def test_sys_settrace_instrumented(how, portal_run, tmp_path):
    shutil.copy(SUITE, tmp_path / SUITE.name)
    (tmp_path / "run_settrace.py").write_text(RUNNER)
    args = [SUITE.name, "-v"] if how == "as_script" else ["run_settrace.py"]
    python = run(PYTHON, tmp_path, args)
    for cache in tmp_path.glob("__pycache__"):
        shutil.rmtree(cache)
    portal = run(portal_run, tmp_path, args)

    expected = verdicts(python.stderr)
    got = verdicts(portal.stderr)
    assert len(expected) >= MIN_CASES, python.stderr[-2000:]
    for case in TIGHT_LOOPS:
        assert f"TraceTestCase.{case}" in expected, f"{case} is no longer in {SUITE}"
    differ = {k: (v, got.get(k)) for k, v in expected.items() if got.get(k) != v}
    assert not differ, (f"verdicts differ from python's (python, portal-run): {differ}\n"
                        f"{portal.stderr[-6000:]}")
    assert got.keys() == expected.keys()
    assert portal.returncode == python.returncode, portal.stderr[-2000:]
    if how == "imported":
        assert python.stdout.startswith("instrumented False"), python.stdout
        assert portal.stdout.startswith("instrumented True"), (
            "the copy was not instrumented: the test would not test Portal", portal.stdout)
    assert not [line for line in portal.stderr.splitlines() if line.startswith("portal:")], \
        portal.stderr[-2000:]
