"""_portal.checkpoint.inspect_checkpoint: `portal inspect`'s engine reads a checkpoint without
unpickling it, and says whether it is sound."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import _portal
from _portal.checkpoint import manifest as ckmanifest, read as ckread, write as ckwrite
from _portal.run.codeindex import CodeRegistry
from _portal.checkpoint.inspect_checkpoint import format_report, inspect, main

PYDIR = os.path.dirname(os.path.dirname(os.path.abspath(_portal.__file__)))


class Payload:
    """Loading this would create a file: proof that nothing is unpickled."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


FIELDS = {"job": "train-abc123", "script": "/src/train.py", "argv": ["train.py", "--lr", "1"],
          "error": {"type": "MemoryError", "message": "oom", "traceback": "...",
                    "file": "/src/train.py", "line": 9},
          "loop": {"file": "/src/train.py", "line": 8, "iteration": 3, "function": "train"},
          "frames": [{"function": "<module>", "file": "/src/train.py", "line": 12},
                     {"function": "train", "file": "/src/train.py", "line": 9}],
          "sources": {}}


@pytest.fixture
def ck(tmp_path):
    """A checkpoint whose state would run a payload if it were ever unpickled."""
    marker = tmp_path / "PAYLOAD-RAN"
    state = {"payload": Payload(str(marker)), "a": np.arange(5000), "b": np.ones(100)}
    info = ckwrite.write_checkpoint(tmp_path / "job", "checkpoint", state, None, FIELDS,
                                       registry=CodeRegistry(), modules={})
    info = info._replace(path=str(info.path))
    yield info
    assert not marker.exists(), "inspect unpickled the checkpoint"


def gen(info):
    return os.path.realpath(info.path)


def test_a_sound_checkpoint(ck, capsys):
    r = inspect(ck.path)
    assert r["sound"] is True and r["problems"] == []
    assert r["signature"] == "valid"
    assert r["directory"] == gen(ck) and r["path"] == ck.path
    assert (r["format"], r["format_version"]) == ("portal-checkpoint", 3)
    assert r["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    for field in ("job", "script", "argv", "loop", "frames"):
        assert r[field] == FIELDS[field]
    assert r["error"] == {"type": "MemoryError", "message": "oom", "file": "/src/train.py", "line": 9}
    assert r["total_bytes"] == ck.total_bytes and r["buffers"] == 2
    assert r["files"] == [
        {"name": rel, "size": rec["size"], "recorded_size": rec["size"],
         **{h: rec[h] for h in ("sha256", "blake3") if h in rec},
         "status": "ok"} for rel, rec in sorted(ck.manifest["files"].items())]
    # pack files of version 3 are digested by blake3 chunks, state.pickle by sha256
    assert {rel: "blake3" in rec for rel, rec in ck.manifest["files"].items()} == {
        rel: rel.startswith("blobs/") for rel in ck.manifest["files"]}
    assert r["sources"] == {"files": 0, "changed": []}
    # The job directory stands for its checkpoint.
    assert inspect(os.path.dirname(ck.path))["directory"] == gen(ck)

    assert main([ck.path]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert lines[0] == f"checkpoint   {ck.path} -> checkpoint.1"
    assert "signature    valid (hmac-sha256 made with your key)" in lines
    assert "loop         /src/train.py:8 in train, iteration 3 (0-based)" in lines
    assert lines[lines.index("frames       (outermost first)") + 1:][:2] == [
        "               /src/train.py:12 in <module>", "               /src/train.py:9 in train"]
    assert any(line.strip().startswith("blobs/0000.bin") and line.endswith(" ok") for line in lines)
    assert lines[-1] == "sound        yes: every check passed"

    assert main([ck.path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == r


def _truncate(info):
    os.truncate(os.path.join(gen(info), "blobs", "0000.bin"), 100)
    return "checkpoint: blobs/0000.bin: size 100 != ", {"blobs/0000.bin": "truncated"}


def _corrupt_both(info):
    for rel in ("state.pickle", "blobs/0000.bin"):
        path = os.path.join(gen(info), rel)
        with open(path, "r+b") as f:
            f.seek(10)
            byte = f.read(1)
            f.seek(10)
            f.write(bytes([byte[0] ^ 1]))
    return ("checkpoint: blobs/0000.bin: blake3 does not match the manifest (corrupted)",
            {"blobs/0000.bin": "corrupted", "state.pickle": "corrupted"})


def _remove(info):
    os.unlink(os.path.join(gen(info), "state.pickle"))
    return "checkpoint: state.pickle: missing", {"state.pickle": "missing"}


def _unsign(info):
    path = os.path.join(gen(info), "manifest.json")
    manifest = json.load(open(path))
    del manifest["hmac"]
    json.dump(manifest, open(path, "w"), indent=1)
    return "checkpoint: manifest.json: carries no signature (hmac)", {}


def _other_key(info):
    path = os.path.join(gen(info), "manifest.json")
    text = ckmanifest.signed_manifest_text(json.load(open(path)), os.urandom(32))
    open(path, "w").write(text)
    return "checkpoint: manifest.json: its signature (hmac) is wrong", {}


def _group_writable(info):
    os.chmod(os.path.join(gen(info), "blobs", "0000.bin"), 0o620)
    return "checkpoint: blobs/0000.bin: is writable by your group (mode 0620)", \
        {"blobs/0000.bin": "untrusted"}


@pytest.mark.parametrize("damage", [_truncate, _corrupt_both, _remove, _unsign, _other_key,
                                    _group_writable],
                         ids=["truncated", "corrupted", "missing", "unsigned", "other-key",
                              "group-writable"])
def test_an_unsound_checkpoint_says_why(ck, damage, capsys):
    says, statuses = damage(ck)
    r = inspect(ck.path)
    assert r["sound"] is False
    assert any(p.startswith(says) for p in r["problems"]), r["problems"]
    got = {f["name"]: f["status"] for f in r["files"]}
    for name, status in statuses.items():
        assert got[name] == status
    assert all(s == "ok" for n, s in got.items() if n not in statuses)
    if damage in (_unsign, _other_key):
        assert r["signature"] == {"_unsign": "missing", "_other_key": "wrong"}[damage.__name__]
    # Everything is checked, not only up to the first failure.
    if damage is _corrupt_both:
        assert len(r["problems"]) == 2
    assert main([ck.path]) == 1
    out, err = capsys.readouterr()
    assert "sound        NO" in out
    assert err.startswith("portal: inspect: checkpoint: ") and err.count("\n") == 1


def test_no_checkpoint_there(tmp_path, capsys):
    assert main([str(tmp_path / "nothing")]) == 1
    out, err = capsys.readouterr()
    assert err == f"portal: inspect: checkpoint: {tmp_path / 'nothing'}: no such checkpoint\n"
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o700)
    r = inspect(str(empty))
    assert not r["sound"]
    assert r["problems"] == ["checkpoint: manifest.json: missing (not a checkpoint, or an "
                             "incomplete one)"]


def test_a_corrupt_manifest(ck):
    path = os.path.join(gen(ck), "manifest.json")
    os.truncate(path, 50)
    r = inspect(ck.path)
    assert not r["sound"]
    # the signature is checked over the raw bytes first; the text is then parsed
    # (with bounds) only to report what it says
    assert r["signature"] == "missing"
    assert r["problems"][0].startswith("checkpoint: manifest.json: carries no signature")
    assert r["problems"][1].startswith("checkpoint: manifest.json: corrupted (not valid json")


def test_runs_as_a_module_without_unpickling(ck):
    r = subprocess.run([sys.executable, "-m", "_portal.checkpoint.inspect_checkpoint", ck.path, "--json"],
                       capture_output=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=PYDIR))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["sound"] is True
    bad = subprocess.run([sys.executable, "-m", "_portal.checkpoint.inspect_checkpoint"],
                         capture_output=True, timeout=60, env=dict(os.environ, PYTHONPATH=PYDIR))
    assert bad.returncode == 2 and b"usage: portal inspect" in bad.stderr


def test_an_old_checkpoint_without_frames(tmp_path):
    fields = {k: v for k, v in FIELDS.items() if k != "frames"}
    info = ckwrite.write_checkpoint(tmp_path / "job", "checkpoint", {"x": 1}, None, fields,
                                       registry=CodeRegistry(), modules={})
    r = inspect(info.path)
    assert r["sound"] and "frames" not in r
    text = format_report(r)
    assert "frames" not in text and "loop         /src/train.py:8 in train, iteration 3 (0-based)" in text


def test_the_payload_would_run_if_unpickled(ck, tmp_path):
    """What makes the other tests' teardown a proof: loading this checkpoint does
    run its payload."""
    import types
    marker = tmp_path / "PAYLOAD-RAN"
    ckread.read_checkpoint(ck.path, None, main_module=types.ModuleType("m"))
    assert marker.exists()
    marker.unlink()
