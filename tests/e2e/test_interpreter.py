"""The user's interpreter (issue 12 item 1, docs/interpreters.md): portal-run runs
the program in the python3 the user would have run - --python, PORTAL_PYTHON, the
active venv, conda env, the first python3 on PATH - with that interpreter's own
sys.executable, sys.prefix and site-packages; refuses in one line an interpreter
Portal was not built for, before any job exists; records the interpreter in the
job, and `portal resume` runs the same one or refuses, the job left suspended."""
import glob
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import PYTHON, python_version

HERE = Path(__file__).parent / "interpreter"
PORTAL_RUN = os.environ.get("PORTAL_RUN") or shutil.which("portal-run")
PORTAL = os.environ.get("PORTAL") or str(Path(PORTAL_RUN).with_name("portal"))
TIMEOUT = 120
SUSPENDED = 75
REFUSED = 2
MODULE = ("WHERE = 'venv'\n"
          "def weight(step):\n"
          "    return 10 * step + 1\n")


def clean_env(home, **extra):
    """The caller's environment with no interpreter chosen by anything but `extra`:
    no PORTAL_PYTHON, no venv or conda env, PATH without the venv."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PORTAL_", "PYTHON")) and k not in ("VIRTUAL_ENV", "CONDA_PREFIX")}
    env.update(PORTAL_HOME=str(home), LC_ALL="C.UTF-8", PYTHONDONTWRITEBYTECODE="1", **extra)
    return env


def run(cmd, cwd, env):
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, timeout=TIMEOUT)


def oom_line():
    lines = (HERE / "train.py").read_text().splitlines()
    return next(n for n, text in enumerate(lines, 1) if text.endswith("# [oom]"))


def make_venv(where: Path, *extra) -> Path:
    subprocess.run([PYTHON, "-m", "venv", "--system-site-packages", "--without-pip", *extra, str(where)],
                   check=True, timeout=TIMEOUT)
    site = subprocess.run([str(where / "bin" / "python3"), "-c",
                           "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True, timeout=TIMEOUT).stdout.strip()
    assert site.startswith(str(where)), site
    Path(site, "onlyhere.py").write_text(MODULE)
    return where


def activated(venv: Path, home: Path, **extra):
    """What `source VENV/bin/activate` gives: VIRTUAL_ENV and PATH."""
    return clean_env(home, VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}:{os.environ.get('PATH', '')}", **extra)


def jobs_of(home: Path):
    jobs = home / "jobs"
    return sorted(jobs.iterdir()) if jobs.exists() else []


def only_job(home: Path) -> Path:
    jobs = jobs_of(home)
    assert len(jobs) == 1, jobs
    return jobs[0]


def record(job: Path):
    return json.loads((job / "job.json").read_text())


@pytest.fixture
def work(tmp_path):
    shutil.copytree(HERE, tmp_path / "work")
    return tmp_path / "work"


@pytest.fixture
def venv(tmp_path):
    return make_venv(tmp_path / "venv")


def test_an_activated_venv_runs_as_python_does_suspends_and_resumes_in_it(work, venv, tmp_path):
    home = tmp_path / "home"
    env = activated(venv, home)
    python = run([shutil.which("python3", path=env["PATH"]), "train.py"], work, env)
    assert python.returncode == 0, python.stderr
    assert f"start {venv}/bin/python3 {venv} ".encode() in python.stdout, python.stdout
    assert b" venv " in python.stdout

    plain = run([PORTAL_RUN, "train.py"], work, env)
    assert (plain.returncode, plain.stdout, plain.stderr) == (0, python.stdout, python.stderr)

    shutil.rmtree(home)
    first = run([PORTAL_RUN, "train.py"], work, dict(env, PORTAL_FAKE_OOM=f"/train.py:{oom_line()}@3"))
    assert first.returncode == SUSPENDED, first.stderr
    job = only_job(home)
    recorded = record(job)["interpreter"]
    assert recorded["path"] == recorded["chosen"] == f"{venv}/bin/python3"
    assert recorded["source"] == "VIRTUAL_ENV"
    assert recorded["prefix"] == str(venv) and recorded["base_prefix"] != str(venv)
    assert recorded["real_path"] == os.path.realpath(f"{venv}/bin/python3")
    assert recorded["version"] == python_version()
    assert re.fullmatch(r"size \d+, modified \d+\.\d+, inode \d+", recorded["fingerprint"]), recorded

    show = run([PORTAL, "show", job.name], work, clean_env(home))
    assert show.returncode == 0, show.stderr
    assert f"python      {venv}/bin/python3 (CPython {recorded['version']}, chosen by VIRTUAL_ENV)\n".encode() \
        in show.stdout, show.stdout

    # The resuming shell has no venv active (and PATH's python3 is another):
    # the job still runs in the venv's interpreter, where onlyhere imports.
    second = run([PORTAL, "resume", job.name], work, clean_env(home))
    assert second.returncode == 0, second.stderr
    assert python.stdout.splitlines()[-1] == f"end {venv}/bin/python3 {venv} venv 105".encode(), python.stdout
    assert first.stdout + second.stdout == python.stdout
    assert record(job)["state"] == "completed"


def executable_of(cmd, env, cwd):
    r = run([*cmd, "-c", "import sys; print(sys.executable)"], cwd, env)
    assert r.returncode == 0, r.stderr
    return r.stdout.decode().strip()


def test_the_choice_order(venv, tmp_path):
    """--python over PORTAL_PYTHON over VIRTUAL_ENV over CONDA_PREFIX over PATH."""
    home = tmp_path / "home"
    conda = make_venv(tmp_path / "conda")  # a prefix with bin/python3 is all CONDA_PREFIX means here
    other = make_venv(tmp_path / "other")
    env = clean_env(home, PORTAL_PYTHON=PYTHON, VIRTUAL_ENV=str(venv), CONDA_PREFIX=str(conda),
                    PATH=f"{other / 'bin'}:{os.environ.get('PATH', '')}")
    assert executable_of([PORTAL_RUN, "--python", f"{other}/bin/python3"], env, tmp_path) == f"{other}/bin/python3"
    assert executable_of([PORTAL_RUN], env, tmp_path) == PYTHON
    del env["PORTAL_PYTHON"]
    assert executable_of([PORTAL_RUN], env, tmp_path) == f"{venv}/bin/python3"
    del env["VIRTUAL_ENV"]
    assert executable_of([PORTAL_RUN], env, tmp_path) == f"{conda}/bin/python3"
    del env["CONDA_PREFIX"]
    assert executable_of([PORTAL_RUN], env, tmp_path) == f"{other}/bin/python3"
    # A bare name is looked up on PATH, as a shell runs it.
    assert executable_of([PORTAL_RUN, "--python", "python3"], env, tmp_path) == f"{other}/bin/python3"


def test_a_stale_venv_is_said_not_passed_over(tmp_path, work):
    home = tmp_path / "home"
    env = clean_env(home, VIRTUAL_ENV=str(tmp_path / "deleted"))
    r = run([PORTAL_RUN, "-c", "open('ran', 'w')"], work, env)
    assert r.returncode == REFUSED
    assert r.stderr == (f"portal: python: VIRTUAL_ENV={tmp_path}/deleted has no executable bin/python3 (an "
                        "environment deactivated or deleted?); unset VIRTUAL_ENV or choose one with --python "
                        "PATH or PORTAL_PYTHON\n").encode()
    assert not (work / "ran").exists() and not jobs_of(home)


def other_version_interpreter(tmp_path):
    """A real CPython of another minor version if this machine has one (pyenv's),
    else a stand-in: a script that runs the build's interpreter reporting 3.9."""
    mine = python_version().rsplit(".", 1)[0]
    for candidate in sorted(glob.glob("/root/.pyenv/versions/3.*/bin/python3")) + \
            [shutil.which(f"python3.{m}") or "" for m in range(8, 16)]:
        if candidate and not candidate.startswith(f"/root/.pyenv/versions/{mine}") and os.access(candidate, os.X_OK):
            r = subprocess.run([candidate, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                               capture_output=True, text=True, timeout=TIMEOUT)
            if r.returncode == 0 and not r.stdout.startswith(mine + "."):
                return candidate, r.stdout.strip()
    fake = tmp_path / "python3.9"
    fake.write_text(f"#!{PYTHON}\n"
                    "import sys\n"
                    "sys.version_info = (3, 9, 18, 'final', 0)\n"
                    "assert sys.argv[1] == '-c', sys.argv\n"
                    "exec(sys.argv[2])\n")
    fake.chmod(0o755)
    return str(fake), "3.9.18"


@pytest.mark.parametrize("how", ["--python", "PORTAL_PYTHON"])
def test_an_unsupported_version_is_refused_in_one_line(tmp_path, work, how):
    home = tmp_path / "home"
    other, version = other_version_interpreter(tmp_path)
    if how == "--python":
        r = run([PORTAL_RUN, "--python", other, "-c", "open('ran', 'w')"], work, clean_env(home))
    else:
        r = run([PORTAL_RUN, "-c", "open('ran', 'w')"], work, clean_env(home, PORTAL_PYTHON=other))
    assert (r.returncode, r.stdout) == (REFUSED, b""), r.stderr
    said = re.fullmatch(f"portal: python: {re.escape(other)} is CPython {re.escape(version)}; Portal supports "
                        r"CPython ([0-9., ]+) \(built here for: ([0-9., ]+)\); choose another with --python PATH "
                        r"or PORTAL_PYTHON\n", r.stderr.decode())
    assert said, r.stderr
    mine = python_version().rsplit(".", 1)[0]
    assert mine in said[1].split(", ") and mine in said[2].split(", ")
    assert version.rsplit(".", 1)[0] not in said[1].split(", ")
    assert not (work / "ran").exists()
    assert not jobs_of(home)


def test_a_supported_version_not_built_here_is_refused(tmp_path, work):
    """An installation without the native modules for the interpreter's SOABI."""
    built = Path(PORTAL_RUN).resolve().parent.parent
    install = tmp_path / "install"
    (install / "bin").mkdir(parents=True)
    shutil.copy2(PORTAL_RUN, install / "bin" / "portal-run")
    shutil.copytree(built / "lib" / "portal" / "python", install / "lib" / "portal" / "python", symlinks=True)
    for so in (install / "lib" / "portal" / "python" / "_portal").glob("_frames.cpython-*.so"):
        so.unlink()
    home = tmp_path / "home"
    r = run([str(install / "bin" / "portal-run"), "-c", "open('ran', 'w')"], work,
            clean_env(home, PORTAL_PYTHON=PYTHON))
    assert (r.returncode, r.stdout) == (REFUSED, b""), r.stderr
    assert r.stderr.startswith(f"portal: python: {PYTHON} is CPython ".encode()), r.stderr
    assert b", which Portal supports but was not built for here (no " in r.stderr
    assert b"(built here for: none)" in r.stderr and r.stderr.endswith(b"--python PATH or PORTAL_PYTHON\n")
    assert r.stderr.count(b"\n") == 1
    assert not (work / "ran").exists() and not jobs_of(home)


def suspended_job(work, home, python):
    r = run([PORTAL_RUN, "--python", python, "train.py"], work,
            clean_env(home, PORTAL_FAKE_OOM=f"/train.py:{oom_line()}@2"))
    assert r.returncode == SUSPENDED, r.stderr
    return only_job(home), r


def test_resume_refuses_an_interpreter_that_changed_or_is_gone(tmp_path, work):
    home = tmp_path / "home"
    venv = make_venv(tmp_path / "copies", "--copies")  # its own binary, which the test can touch
    python = f"{venv}/bin/python3"
    job, first = suspended_job(work, home, python)
    st = os.stat(python)

    os.utime(python, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    r = run([PORTAL, "resume", job.name], work, clean_env(home))
    assert (r.returncode, r.stdout) == (REFUSED, b""), r.stderr
    assert re.fullmatch(
        (f"portal: resume: python: {python} is not the interpreter this job ran with \\(it ran with CPython "
         f"[0-9.]+ at {os.path.realpath(python)}, size {st.st_size}, modified {st.st_mtime_ns // 10**9}\\.\\d+, "
         f"inode {st.st_ino}, prefix {venv}; it is now CPython [0-9.]+ at .*, modified "
         f"{st.st_mtime_ns // 10**9 + 1}\\.\\d+, .*\\): the job stays suspended \\(portal show {job.name}\\)\n"),
        r.stderr.decode()), r.stderr
    assert record(job)["state"] == "suspended"

    moved = tmp_path / "moved"
    venv.rename(moved)
    r = run([PORTAL, "resume", job.name], work, clean_env(home))
    assert r.returncode == REFUSED
    assert r.stderr.startswith(f"portal: resume: python: {python}, the interpreter this job ran with (".encode())
    assert r.stderr.endswith(f"), is gone: the job stays suspended (portal show {job.name})\n".encode())
    assert record(job)["state"] == "suspended"

    # Put back as it was: the job resumes, in it.
    moved.rename(venv)
    os.utime(python, ns=(st.st_atime_ns, st.st_mtime_ns))
    r = run([PORTAL, "resume", job.name], work, clean_env(home))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == f"end {python} {venv} venv 105".encode()


def test_version_names_the_interpreter_it_would_use(tmp_path, venv):
    home = tmp_path / "home"
    version = python_version()
    r = run([PORTAL_RUN, "--version"], tmp_path, clean_env(home, PORTAL_PYTHON=PYTHON))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert lines[0].startswith("portal-run (portal) ")
    assert lines[1] == f"python: {PYTHON} (CPython {version}, chosen by PORTAL_PYTHON)"
    r = run([PORTAL_RUN, "--version"], tmp_path, activated(venv, home))
    assert r.stdout.decode().splitlines()[1] == f"python: {venv}/bin/python3 (CPython {version}, chosen by VIRTUAL_ENV)"
    assert not home.exists()  # --version creates no store


@pytest.mark.skipif(not os.access("/root/.pyenv/shims/python3", os.X_OK),
                    reason="no pyenv shim on this machine (/root/.pyenv/shims/python3)")
def test_a_shim_runs_the_interpreter_it_resolves_to(tmp_path):
    """pyenv's shims/python3 is a shell script: portal-run runs the interpreter it
    resolves to, the one `python3` gives under the same PATH and PYENV_VERSION."""
    home = tmp_path / "home"
    env = clean_env(home, PATH=f"/root/.pyenv/shims:{os.environ.get('PATH', '')}")
    env.setdefault("PYENV_ROOT", "/root/.pyenv")
    python = executable_of(["/root/.pyenv/shims/python3"], env, tmp_path)
    assert python != "/root/.pyenv/shims/python3"
    mine = python_version().rsplit(".", 1)[0]
    version = run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], tmp_path, env)
    if version.stdout.decode().strip() != mine:
        pytest.skip(f"pyenv's python3 here is {version.stdout.decode().strip()}, which Portal is not built for")
    assert executable_of([PORTAL_RUN], env, tmp_path) == python


def test_a_job_recorded_without_its_interpreter_resumes_in_the_builds(tmp_path, work):
    """Jobs suspended before interpreters were recorded ran in the interpreter the
    build was configured with (CTest's PORTAL_PYTHON): they resume there, whatever
    the resuming shell's PATH says."""
    home = tmp_path / "home"
    line = next(n for n, text in enumerate((HERE / "plain.py").read_text().splitlines(), 1)
                if text.endswith("# [oom]"))
    r = run([PORTAL_RUN, "plain.py"], work, clean_env(home, PORTAL_PYTHON=PYTHON, PORTAL_FAKE_OOM=f"/plain.py:{line}@2"))
    assert r.returncode == SUSPENDED, r.stderr
    job = only_job(home)
    older = record(job)
    assert older.pop("interpreter")["path"] == PYTHON
    tmp = job / "job.json.edit"
    tmp.write_text(json.dumps(older))
    tmp.chmod(0o600)
    tmp.rename(job / "job.json")
    show = run([PORTAL, "show", job.name], work, clean_env(home))
    assert show.returncode == 0 and b"\npython " not in show.stdout, show
    r = run([PORTAL, "resume", job.name], work, clean_env(home))
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"end {PYTHON} 6\n".encode()
