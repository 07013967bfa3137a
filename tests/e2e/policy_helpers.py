"""What the policy and preemption tests share: the corpus (policy/) copied to a
fresh directory, runs under python3, portal-run and `portal resume` with the job
store beside it, and the job's record."""
import json
import os
import shutil
import subprocess
from pathlib import Path

from conftest import PYTHON, store_env  # PYTHON: the interpreter under test ($PORTAL_PYTHON)

HERE = Path(__file__).parent / "policy"
PORTAL_RUN = os.environ.get("PORTAL_RUN") or shutil.which("portal-run")
PORTAL = os.environ.get("PORTAL") or str(Path(PORTAL_RUN).with_name("portal"))
TIMEOUT = 300
SUSPENDED = 75


def corpus(tmp_path):
    work = tmp_path / "work"
    shutil.copytree(HERE, work)
    return work


def env_for(work, **extra):
    env = store_env(work.parent / "home", **extra)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    return env


def python(work, *args, **env):
    return subprocess.run([PYTHON, *args], cwd=work, capture_output=True, timeout=TIMEOUT,
                          env=dict(env_for(work), **env))


def portal_run(work, *args, env=None, **kw):
    return subprocess.run([PORTAL_RUN, *args], cwd=work, capture_output=True, timeout=TIMEOUT,
                          env=env_for(work, **(env or {})), **kw)


def portal(work, *args):
    return subprocess.run([PORTAL, *args], cwd=work, capture_output=True, timeout=TIMEOUT,
                          env=env_for(work))


def only_job(work):
    [job] = [p.name for p in (work.parent / "home" / "jobs").iterdir()]
    return job


def record(work, job):
    return json.loads((work.parent / "home" / "jobs" / job / "job.json").read_text())


def lines(stream, prefix):
    return [line for line in stream.decode().splitlines() if line.startswith(prefix)]
