"""Checkpoints that cannot be tampered with (issue 5, items 4 and 5), end to end.

A job is suspended by a fake out-of-memory error (integrity/train.py, a loop in a
function over a numpy array: a state.pickle and a pack file), its checkpoint is
damaged or tampered with, and `portal resume JOB` must refuse it before
unpickling anything, with one `portal: resume: ...` line naming what is wrong,
the job staying suspended and its record intact (all it said still there; the
refused attempt logged as a run whose outcome is "refused").  Each case then
undoes the damage and resumes the job, which ends with python's own output: the
refusal really left the job intact.

Also: the modes of everything Portal writes under a umask of 000, and `python3 -m
_portal.checkpoint.inspect_checkpoint` (the engine of `portal inspect`) on a real job.
"""
import hashlib
import json
import os
import pickle
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import PYTHON  # the interpreter under test ($PORTAL_PYTHON)

CORPUS = Path(__file__).parent / "integrity"
PORTAL_RUN = os.environ.get("PORTAL_RUN") or shutil.which("portal-run")
PORTAL = os.environ.get("PORTAL") or str(Path(PORTAL_RUN).with_name("portal"))
PYDIR = os.environ.get("PORTAL_PYDIR")   # the staged _portal package (CTest sets it)
SUSPENDED = 75


def oom_line():
    lines = (CORPUS / "train.py").read_text().splitlines()
    return next(n for n, text in enumerate(lines, 1) if text.endswith("# [oom]"))


def env_for(home, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PORTAL_", "PYTHON"))}
    env.update(PORTAL_HOME=str(home), PORTAL_PYTHON=PYTHON, LC_ALL="C.UTF-8", PYTHONDONTWRITEBYTECODE="1", **extra)
    return env


@pytest.fixture(scope="module")
def expected(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("python")
    shutil.copy(CORPUS / "train.py", cwd)
    r = subprocess.run([PYTHON, "train.py"], cwd=cwd, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


class Job:
    """A job suspended at the third iteration of train()'s loop."""

    def __init__(self, root, umask=None):
        self.cwd = root / "work"
        self.cwd.mkdir(parents=True)
        shutil.copy(CORPUS / "train.py", self.cwd)
        self.home = root / "home"
        cmd = [PORTAL_RUN, "train.py"]
        if umask is not None:
            cmd = ["sh", "-c", f'umask {umask:03o}; exec "$0" "$@"'] + cmd
        r = subprocess.run(cmd, cwd=self.cwd, capture_output=True, timeout=60,
                           env=env_for(self.home, PORTAL_FAKE_OOM=f"train.py:{oom_line()}@3"))
        assert r.returncode == SUSPENDED, r.stderr
        self.first_stdout = r.stdout
        self.id = re.search(rb"portal resume (\S+)", r.stderr).group(1).decode()
        self.dir = self.home / "jobs" / self.id
        self.link = self.dir / "checkpoint"
        self.gen = self.dir / os.readlink(self.link)
        self.record = (self.dir / "job.json").read_bytes()
        self.key = self.home / "key"

    def manifest(self):
        return json.loads((self.gen / "manifest.json").read_text())

    def backup(self, where):
        shutil.copytree(self.gen, where, symlinks=True)          # modes kept (copy2)
        return where

    def restore(self, backup):
        shutil.rmtree(self.gen)
        shutil.copytree(backup, self.gen, symlinks=True)

    def resume(self):
        return subprocess.run([PORTAL, "resume", self.id], cwd=self.cwd, capture_output=True,
                              timeout=60, env=env_for(self.home))

    def assert_refused(self, says, ending="the job stays suspended"):
        r = self.resume()
        err = r.stderr.decode()
        assert r.returncode == 1 and r.stdout == b"", (r.returncode, r.stdout, err)
        assert err.startswith("portal: resume: ") and err.count("\n") == 1, err
        assert says in err, f"{says!r} not in {err!r}"
        assert err.rstrip().endswith(ending), err
        self.assert_record_intact()
        return err

    def assert_record_intact(self):
        """Still suspended, everything it said still there; the refused attempt is
        logged as one more run whose outcome is "refused" (the supervisor's log)."""
        before = json.loads(self.record)
        after = json.loads((self.dir / "job.json").read_text())
        assert after["state"] == before["state"] == "suspended"
        same = {k for k in before if k not in ("runs", "updated")}
        assert {k: after.get(k) for k in same} == {k: before[k] for k in same}
        runs = before.get("runs", [])
        assert after.get("runs", [])[:len(runs)] == runs
        assert all(r.get("outcome") == "refused" for r in after.get("runs", [])[len(runs):])

    def assert_resumes(self, expected):
        r = self.resume()
        assert r.returncode == 0, r.stderr
        assert self.first_stdout + r.stdout == expected


@pytest.fixture
def job(tmp_path):
    return Job(tmp_path)


# --- damage: a missing, truncated, corrupted file, named ---------------------------

def _truncate(job):
    os.truncate(job.gen / "blobs" / "0000.bin", 1000)


def _corrupt(job):
    path = job.gen / "state.pickle"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _remove(job):
    os.unlink(job.gen / "blobs" / "0000.bin")


def _remove_manifest(job):
    os.unlink(job.gen / "manifest.json")


DAMAGES = [
    (_truncate, "checkpoint: blobs/0000.bin: size 1000 != "),
    (_corrupt, "checkpoint: state.pickle: sha256 does not match the manifest (corrupted)"),
    (_remove, "checkpoint: blobs/0000.bin: missing"),
    (_remove_manifest, "checkpoint: manifest.json: missing"),
]


def test_a_damaged_checkpoint_is_refused_naming_the_file(job, tmp_path, expected):
    """One job, each damage in turn (undone after each refusal), then resumed."""
    backup = job.backup(tmp_path / "backup")
    for damage, says in DAMAGES:
        damage(job)
        job.assert_refused(says)
        job.restore(backup)
    job.assert_resumes(expected)


# --- tampering: an unsigned, edited or planted checkpoint is never unpickled ---------

class Payload:
    """What an attacker's pickle would do when loaded: create a file."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _replace_state(job, marker, keep_signature):
    """Swap in a hostile state.pickle and make the manifest's records match it, as
    someone who can write the files (but has not the key) would."""
    evil = pickle.dumps(Payload(str(marker)), protocol=5)
    (job.gen / "state.pickle").write_bytes(evil)
    raw = (job.gen / "manifest.json").read_bytes()
    manifest = json.loads(raw)
    old = manifest["files"]["state.pickle"]
    new = {"size": len(evil), "sha256": hashlib.sha256(evil).hexdigest()}
    text = raw.decode().replace(f'"size": {old["size"]}', f'"size": {new["size"]}', 1) \
                       .replace(old["sha256"], new["sha256"])
    if not keep_signature:
        manifest = json.loads(text)
        del manifest["hmac"]
        text = json.dumps(manifest, indent=1)
    (job.gen / "manifest.json").write_text(text)


@pytest.mark.parametrize("keep_signature,says", [
    (False, "checkpoint: manifest.json: carries no signature (hmac): it was not made by you"),
    (True, "checkpoint: manifest.json: its signature (hmac) is wrong: it was not made by you"),
], ids=["unsigned", "edited"])
def test_an_unsigned_or_edited_checkpoint_is_never_unpickled(job, tmp_path, expected,
                                                            keep_signature, says):
    backup = job.backup(tmp_path / "backup")
    marker = tmp_path / "PAYLOAD-RAN"
    _replace_state(job, marker, keep_signature)
    job.assert_refused(says)
    assert not marker.exists(), "the hostile pickle was loaded"
    job.restore(backup)
    job.assert_resumes(expected)


def test_a_checkpoint_planted_by_someone_else_is_refused(job, tmp_path, expected):
    """Another user's complete, self-consistent checkpoint of the same program (made
    with their key), put in place of the job's: refused by its signature."""
    other = Job(tmp_path / "other-user")
    assert other.key.read_bytes() != job.key.read_bytes()
    backup = job.backup(tmp_path / "backup")
    shutil.rmtree(job.gen)
    shutil.copytree(other.gen, job.gen, symlinks=True)
    job.assert_refused("its signature (hmac) is wrong")
    job.restore(backup)
    job.assert_resumes(expected)


def test_without_the_key_nothing_is_trusted(job, tmp_path, expected):
    saved = job.key.read_bytes()
    job.key.unlink()
    job.assert_refused("checkpoint: cannot be verified: you have no key")
    job.key.write_bytes(saved)
    os.chmod(job.key, 0o644)
    job.assert_refused("has mode 0644, others may read or change it")
    os.chmod(job.key, 0o600)
    job.assert_resumes(expected)


# --- owners and modes ---------------------------------------------------------------

WRITABLE = [
    ("manifest.json", 0o620, "checkpoint: manifest.json: is writable by your group (mode 0620)"),
    ("blobs/0000.bin", 0o602, "checkpoint: blobs/0000.bin: is writable by others (mode 0602)"),
    ("blobs", 0o777, "checkpoint: blobs/: is writable by your group and others (mode 0777)"),
    (".", 0o770, "is writable by your group (mode 0770)"),              # the generation
    # The job directory: refused by the store rule before the checkpoint is read
    # (docs/security.md, "The store").
    ("..", 0o707, None),
]
JOB_DIR_REFUSED = "writable by group or others (mode 0707); it cannot be trusted (chmod 700 "


def test_a_checkpoint_others_can_write_is_refused(job, expected):
    for target, mode, says in WRITABLE:
        path = job.gen / target
        before = os.stat(path).st_mode & 0o777
        os.chmod(path, mode)
        if target == "..":
            job.assert_refused(f"{job.gen.parent}: {JOB_DIR_REFUSED}{job.gen.parent})",
                               ending="nothing of it is run")
        else:
            job.assert_refused(says)
        os.chmod(path, before)
    job.assert_resumes(expected)


def test_a_checkpoint_not_owned_by_you_is_refused(job, expected):
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root; test_checkpoint.py's "
                    "test_refuses_what_you_do_not_own checks the refusal with a stubbed owner")
    for target in ("state.pickle", "blobs/0000.bin", "."):
        path = job.gen / target
        os.chown(path, 65534, 65534)
        job.assert_refused("is owned by uid 65534, not by you (uid 0); it is not trusted")
        os.chown(path, 0, 0)
    job.assert_resumes(expected)


def test_everything_is_private_whatever_the_umask(tmp_path, expected):
    job = Job(tmp_path, umask=0o000)
    modes = {}
    for path in [job.home, job.key, job.home / "jobs"] + sorted(job.dir.rglob("*")) + [job.dir]:
        if path.is_symlink():
            continue
        modes[str(path.relative_to(job.home))] = os.stat(path).st_mode & 0o777
    bad = {p: f"{m:04o}" for p, m in modes.items()
           if m != (0o700 if os.path.isdir(job.home / p) else 0o600)}
    assert not bad, f"not private under umask 000: {bad}"
    assert any(p.endswith("0000.bin") for p in modes) and any(p.endswith("job.json") for p in modes)
    job.assert_resumes(expected)


# --- portal inspect's engine on a real job ------------------------------------------

def inspect(job, *args):
    if not PYDIR:
        pytest.skip("PORTAL_PYDIR (the staged _portal package) is not set; CTest sets it")
    return subprocess.run([PYTHON, "-m", "_portal.checkpoint.inspect_checkpoint", str(job.dir), *args],
                          capture_output=True, timeout=60,
                          env=env_for(job.home, PYTHONPATH=PYDIR))


def test_inspect_a_suspended_job(job, expected):
    r = inspect(job, "--json")
    assert r.returncode == 0 and r.stderr == b"", r.stderr
    report = json.loads(r.stdout)
    assert report["sound"] and report["problems"] == [] and report["signature"] == "valid"
    assert report["job"] == job.id and report["loop"]["iteration"] == 2   # counted from 0
    train = str(job.cwd / "train.py")
    assert report["frames"] == [
        {"function": "<module>", "file": train, "line": 14},          # print("result", train(5))
        {"function": "train", "file": train, "line": oom_line()},     # the loop body's start
    ]
    assert {f["name"]: f["status"] for f in report["files"]} == \
        {"state.pickle": "ok", "blobs/0000.bin": "ok"}
    text = inspect(job)
    assert text.returncode == 0
    out = text.stdout.decode()
    assert "signature    valid" in out and f"{train}:14 in <module>" in out
    assert "sound        yes" in out
    # Nothing was unpickled or changed: the job still resumes.
    os.truncate(job.gen / "blobs" / "0000.bin", 10)
    bad = inspect(job)
    assert bad.returncode == 1
    assert bad.stderr.decode().startswith("portal: inspect: checkpoint: blobs/0000.bin: size 10 != ")
    assert "sound        NO" in bad.stdout.decode()
    job.assert_refused("blobs/0000.bin")
