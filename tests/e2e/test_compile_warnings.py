"""A compile-time warning (SyntaxWarning) comes as often under portal-run as under
python, although Portal caches the instrumented code of the user's sources.

python compiles its main script on every run, so the script's SyntaxWarning comes
on every run; an imported module's comes until a .pyc holds the module's code
(the next run is silent), and on every run under -B (PYTHONDONTWRITEBYTECODE).
Each case runs python twice, then portal-run twice with one job store, in a fresh
directory at the same path, and compares each run's stderr with python's."""
import os
import shutil
import subprocess

import pytest

from conftest import PYTHON, RUN_TIMEOUT, base_env

MAIN = '''\
import mod
x = len("a")
if x is 1:                      # SyntaxWarning: "is" with a literal
    print("one")
for i in range(2):
    print(i, mod.f(i))
'''
MOD = '''\
def f(i):
    return "zero" if i is 0 else "more"      # SyntaxWarning too
'''


def runs(launcher, place, env, times=2):
    """[(stdout, stderr)] of `launcher main.py` run `times` times in a fresh `place`."""
    shutil.rmtree(place, ignore_errors=True)
    place.mkdir()
    (place / "main.py").write_text(MAIN)
    (place / "mod.py").write_text(MOD)
    out = []
    for _ in range(times):
        p = subprocess.run([launcher, "main.py"], cwd=place, env=env, capture_output=True,
                           timeout=RUN_TIMEOUT)
        assert p.returncode == 0, p.stderr.decode(errors="replace")
        out.append((p.stdout, p.stderr))
    return out


@pytest.mark.parametrize("no_bytecode", [False, True], ids=["pyc", "dont-write-bytecode"])
def test_syntax_warnings_come_as_under_python(portal_run, tmp_path, no_bytecode):
    extra = {"PYTHONDONTWRITEBYTECODE": "1"} if no_bytecode else {}
    place = tmp_path / "prog"
    python = runs(PYTHON, place, base_env(extra))
    portal = runs(portal_run, place, base_env(dict(extra, PORTAL_HOME=str(tmp_path / "store"))))
    # the case says something: python warns of the script on both runs
    assert all(err.count(b": SyntaxWarning:") >= 1 for _, err in python), python
    assert python[0][1].count(b": SyntaxWarning:") == 2      # the script's and the module's
    assert python[1][1].count(b": SyntaxWarning:") == (2 if no_bytecode else 1)
    for run, (want, got) in enumerate(zip(python, portal), 1):
        assert got == want, f"run {run}: python {want!r}, portal-run {got!r}"
