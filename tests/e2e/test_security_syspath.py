"""Nothing runs that python would not run (issue 25, finding 3 and the venv part of
finding 5; docs/security.md, "The working directory" and "The interpreter"):

- portal-run starts python with its bootstrap under -P: neither python's start,
  Portal's bootstrap, a rescue (the checkpoint's writer) nor `portal resume`
  (before the checkpoint is trusted, and after) imports anything from the working
  directory.  A directory with a module planted under the name of every module of
  the standard library (each writes a marker when imported, then hands over the
  real module) is the working directory of a suspended and resumed job, in script,
  -m and -c mode: the markers are exactly those python itself writes for the same
  command line (none for a script; what its -m and -c runners import from there),
  and none at resume.  The program sees python's own sys.path and sys.flags, at
  its start and after the resume.
- a job's interpreter is run at resume only while it is still the user's: a venv at
  the recorded path owned by another user, writable by group or others, or with
  its pyvenv.cfg changed is refused before it is run (its .pth files would run as
  the user), the job left suspended.
"""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import PYTHON, RUN_TIMEOUT, base_env

PORTAL_RUN = os.environ.get("PORTAL_RUN") or shutil.which("portal-run")
PORTAL = os.environ.get("PORTAL") or str(Path(PORTAL_RUN).with_name("portal"))
SUSPENDED = 75
REFUSED = 2

# The program: prints what python gave it, is suspended by a fake out-of-memory
# error at its loop's second iteration (line 4), and prints it again at its end
# (after the resume).  It imports nothing but sys (built in).
PROGRAM = """\
import sys
print("start", sys.path, sys.flags)
for i in range(3):
    print("step", i)
print("end", sys.path, sys.flags)
"""
FAKE_LINE = 4

# Each planted module: a marker named after it, then the real module in its place
# (found on sys.path without the planted directory), so that the run goes on as
# it would have and every later import is seen too.
PLANTED = """\
open({marks!r} + "/" + __name__, "w").close()
import sys as _sys
_saved = _sys.path[:]
_sys.path[:] = [p for p in _saved if (p or ".") != "." and p != {plant!r}]
del _sys.modules[__name__]
try:
    _real = __import__(__name__)
finally:
    _sys.path[:] = _saved
_sys.modules[__name__] = _real
"""


def python_facts():
    r = subprocess.run([PYTHON, "-c", "import sys; print(' '.join(sorted(set(sys.stdlib_module_names)"
                        " - set(sys.builtin_module_names))))"],
                       capture_output=True, text=True, env=base_env(), timeout=RUN_TIMEOUT, check=True)
    return r.stdout.split()


@pytest.fixture(scope="module")
def stdlib_names():
    names = python_facts()
    assert "opcode" in names and "pickle" in names, names
    return names


@pytest.fixture
def plant(tmp_path, stdlib_names):
    """(plant directory, marker directory, program directory): the plant holds a
    module for each standard library name; the program lives elsewhere."""
    plant_dir, marks, prog = tmp_path / "plant", tmp_path / "marks", tmp_path / "prog"
    for d in (plant_dir, marks, prog):
        d.mkdir()
    for name in stdlib_names:
        (plant_dir / f"{name}.py").write_text(PLANTED.format(marks=str(marks), plant=str(plant_dir)))
    (prog / "prog.py").write_text(PROGRAM)
    return plant_dir, marks, prog


def marked(marks: Path):
    found = sorted(p.name for p in marks.iterdir())
    for p in marks.iterdir():
        p.unlink()
    return found


def env_for(tmp_path, prog, **extra):
    env = base_env({"PORTAL_HOME": str(tmp_path / "home"), "PYTHONDONTWRITEBYTECODE": "1",
                    "PYTHONPATH": str(prog)})
    env.update(extra)
    return env


def command_line(mode, prog):
    if mode == "script":
        return [str(prog / "prog.py")]
    if mode == "module":
        return ["-m", "prog"]          # found through PYTHONPATH, not the working directory
    return ["-c", PROGRAM]


def fake_spec(mode, prog):
    where = {"script": str(prog / "prog.py"), "module": str(prog / "prog.py"), "command": "<string>"}[mode]
    return f"{where}:{FAKE_LINE}@2"


def only_job(tmp_path):
    jobs = sorted((tmp_path / "home" / "jobs").iterdir())
    assert len(jobs) == 1, jobs
    return jobs[0]


@pytest.mark.parametrize("mode", ["script", "module", "command"])
@pytest.mark.parametrize("safe_path", ["", "1"], ids=["default", "PYTHONSAFEPATH"])
def test_a_planted_working_directory_runs_only_what_python_runs(tmp_path, plant, mode, safe_path):
    plant_dir, marks, prog = plant
    env = env_for(tmp_path, prog)
    if safe_path:
        env["PYTHONSAFEPATH"] = safe_path
    cmd = command_line(mode, prog)

    python = subprocess.run([PYTHON, *cmd], cwd=plant_dir, env=env, capture_output=True, timeout=RUN_TIMEOUT)
    assert python.returncode == 0, python.stderr
    python_marks = marked(marks)

    first = subprocess.run([PORTAL_RUN, *cmd], cwd=plant_dir, capture_output=True, timeout=RUN_TIMEOUT,
                           env=dict(env, PORTAL_FAKE_OOM=fake_spec(mode, prog)))
    assert first.returncode == SUSPENDED, first.stderr
    # The run and its rescue (the checkpoint's writer) import from the working
    # directory nothing python's own start does not for this command line (-m:
    # runpy, as python's runner; -c under CPython 3.13+: python's runner imports
    # linecache from there, portal-run's under -P does not).
    assert set(marked(marks)) <= set(python_marks), python_marks
    job = only_job(tmp_path)

    resumed = subprocess.run([PORTAL, "resume", job.name], cwd=plant_dir, env=env, capture_output=True,
                             timeout=RUN_TIMEOUT)
    assert resumed.returncode == 0, resumed.stderr
    assert marked(marks) == []   # nothing at resume: python has no such step
    # python's sys.path and sys.flags, at the start and after the resume
    assert first.stdout + resumed.stdout == python.stdout, (first.stdout + resumed.stdout, python.stdout)
    if mode == "script" and not safe_path:
        assert python_marks == []


def test_the_plant_covers_what_portal_imports(tmp_path, plant, stdlib_names):
    """The plant is not idle: what Portal's bootstrap, rescue and resume import
    (-X importtime of a run that is suspended and resumed, in a clean directory)
    is planted, and a planted module does write its marker when imported from
    the working directory."""
    plant_dir, marks, prog = plant
    clean = tmp_path / "clean"
    clean.mkdir()
    env = env_for(tmp_path, prog, PYTHONPROFILEIMPORTTIME="1")
    first = subprocess.run([PORTAL_RUN, str(prog / "prog.py")], cwd=clean, capture_output=True,
                           timeout=RUN_TIMEOUT, env=dict(env, PORTAL_FAKE_OOM=fake_spec("script", prog)))
    assert first.returncode == SUSPENDED, first.stderr
    resumed = subprocess.run([PORTAL, "resume", only_job(tmp_path).name], cwd=clean, env=env,
                             capture_output=True, timeout=RUN_TIMEOUT)
    assert resumed.returncode == 0, resumed.stderr
    imported = set()
    for err in (first.stderr, resumed.stderr):
        for line in err.decode().splitlines():
            m = re.match(r"import time:\s+\d+ \|\s+\d+ \|\s+(\S+)$", line)
            if m:
                imported.add(m.group(1).split(".")[0])
    python = subprocess.run([PYTHON, str(prog / "prog.py")], cwd=clean, capture_output=True,
                            timeout=RUN_TIMEOUT, env=env)
    own = {m.group(1).split(".")[0] for m in re.finditer(r"import time:\s+\d+ \|\s+\d+ \|\s+(\S+)\n",
                                                          python.stderr.decode())}
    portal_only = (imported - own) & set(stdlib_names)
    # The modules of the finding, among others; all of them planted.
    assert {"opcode", "ast", "pickle", "json", "hashlib", "tempfile"} <= portal_only, sorted(portal_only)
    assert all((plant_dir / f"{name}.py").exists() for name in portal_only)
    r = subprocess.run([PYTHON, "-c", "import opcode, pickle"], cwd=plant_dir, env=env_for(tmp_path, prog),
                       capture_output=True, timeout=RUN_TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert {"opcode", "pickle"} <= set(marked(marks))


# ---- the interpreter recorded in a job -------------------------------------------

LOOP = """\
import sys
for i in range(3):
    print("step", i, sys.prefix == sys.base_prefix)
"""


def make_venv(where: Path) -> Path:
    subprocess.run([PYTHON, "-m", "venv", "--system-site-packages", "--without-pip", str(where)],
                   check=True, timeout=RUN_TIMEOUT, env=base_env())
    return where


def suspended_in_venv(tmp_path):
    venv = make_venv(tmp_path / "venv")
    work = tmp_path / "work"
    work.mkdir()
    (work / "loop.py").write_text(LOOP)
    env = env_for(tmp_path, work)
    first = subprocess.run([PORTAL_RUN, "--python", str(venv / "bin" / "python3"), "loop.py"], cwd=work,
                           env=dict(env, PORTAL_FAKE_OOM=f"{work}/loop.py:3@2"), capture_output=True,
                           timeout=RUN_TIMEOUT)
    assert first.returncode == SUSPENDED, first.stderr
    job = only_job(tmp_path)
    recorded = json.loads((job / "job.json").read_text())["interpreter"]
    assert recorded["prefix"] == str(venv)
    assert re.fullmatch(r"pyvenv\.cfg size \d+, modified \d+\.\d+, inode \d+; "
                        + re.escape(str(venv / "bin" / "python3")) + r" size \d+, modified \d+\.\d+, inode \d+",
                        recorded["venv_fingerprint"]), recorded
    return venv, work, job, env


def resume(job, work, env):
    return subprocess.run([PORTAL, "resume", job.name], cwd=work, env=env, capture_output=True,
                          timeout=RUN_TIMEOUT)


def state_of(job):
    return json.loads((job / "job.json").read_text())["state"]


def plant_pth(venv: Path, marker: Path):
    """A .pth file in the venv's site-packages: its import line runs at python's start."""
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "zz_planted.pth").write_text(f"import os; open({str(marker)!r}, 'w').close()\n")


def test_a_venv_made_again_by_another_user_is_refused(tmp_path, users):
    _, attacker = users
    venv, work, job, env = suspended_in_venv(tmp_path)
    # The venv is gone and another user makes one at the same path, with a .pth.
    shutil.rmtree(venv)
    make_venv(venv)
    marker = tmp_path / "pth-ran"
    plant_pth(venv, marker)
    for root, dirs, files in os.walk(venv):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), attacker.uid, attacker.gid)
    os.lchown(venv, attacker.uid, attacker.gid)
    os.chmod(tmp_path, 0o755)   # the attacker could reach it

    r = resume(job, work, env)
    assert (r.returncode, r.stdout) == (REFUSED, b""), r.stderr
    assert r.stderr.decode() == (
        f"portal: resume: python: {venv / 'bin' / 'python3'} is owned by uid {attacker.uid}, neither you nor root, "
        f"so another user could have replaced or changed the interpreter this job ran with "
        f"({venv / 'bin' / 'python3'} (CPython {recorded_version(job)}, chosen by --python)); it is not run: "
        f"the job stays suspended (portal show {job.name}); if it is yours, make it so again (chown, chmod go-w) "
        f"and resume\n")
    assert not marker.exists()   # the venv's python never ran
    assert state_of(job) == "suspended"


def recorded_version(job):
    return json.loads((job / "job.json").read_text())["interpreter"]["version"]


@pytest.mark.parametrize("what", ["venv", "site-packages", "pyvenv.cfg"])
def test_a_venv_others_can_write_is_refused(tmp_path, what):
    venv, work, job, env = suspended_in_venv(tmp_path)
    marker = tmp_path / "pth-ran"
    plant_pth(venv, marker)
    target = {"venv": venv, "site-packages": next(venv.glob("lib/python*/site-packages")),
              "pyvenv.cfg": venv / "pyvenv.cfg"}[what]
    mode = target.stat().st_mode & 0o7777
    target.chmod(mode | 0o022)
    r = resume(job, work, env)
    assert (r.returncode, r.stdout) == (REFUSED, b""), r.stderr
    assert r.stderr.decode().startswith(
        f"portal: resume: python: {target} is writable by group or others (mode {mode | 0o022:04o}), so another "
        f"user could have replaced or changed the interpreter this job ran with"), r.stderr
    assert not marker.exists()
    assert state_of(job) == "suspended"
    # Made private again: the same venv resumes (its .pth is the user's own).
    target.chmod(mode)
    r = resume(job, work, env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"step 1 False\nstep 2 False\n"


def test_a_venv_whose_pyvenv_cfg_changed_is_refused(tmp_path):
    venv, work, job, env = suspended_in_venv(tmp_path)
    cfg = venv / "pyvenv.cfg"
    cfg.write_text(cfg.read_text() + "prompt = other\n")
    r = resume(job, work, env)
    assert (r.returncode, r.stdout) == (REFUSED, b""), r.stderr
    assert re.fullmatch(
        f"portal: resume: python: {re.escape(str(venv / 'bin' / 'python3'))} is not the interpreter this job ran "
        f"with \\(its virtual environment {re.escape(str(venv))} was re-made or changed since: it ran with "
        f"pyvenv\\.cfg size \\d+, .*; it is now pyvenv\\.cfg size \\d+, .*\\): the job stays suspended "
        f"\\(portal show {job.name}\\)\n", r.stderr.decode()), r.stderr
    assert state_of(job) == "suspended"
