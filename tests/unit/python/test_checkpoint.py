"""_portal.checkpoint (format, manifest, write, read): the on-disk format, its atomic commit and its refusals."""
import errno
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
import types

import numpy as np
import pytest

import _portal
from _portal import _blake3
from _portal.checkpoint import format as ckformat, manifest as ckmanifest, read as ckread, write as ckwrite
from _portal.store import signing
from _portal.checkpoint.format import CheckpointError, SourceChanged
from _portal.checkpoint.read import read_checkpoint
from _portal.checkpoint.write import write_checkpoint
from _portal.run.codeindex import CodeChanged, CodeRegistry, Recompiler
from _portal.checkpoint.reducers import Unsaveable

PYDIR = os.path.dirname(os.path.dirname(os.path.abspath(_portal.__file__)))


def compile_fn(source, filename):
    return compile(source, filename, "exec", dont_inherit=True)


@pytest.fixture
def program(tmp_path):
    """A user module and a __main__ of a simulated program; sys.modules restored after."""
    saved = dict(sys.modules)
    registry = CodeRegistry()
    src_dir = tmp_path / "src"
    src_dir.mkdir()

    def module(name, source, main=False):
        source = textwrap.dedent(source)
        path = src_dir / f"{name}.py"
        path.write_text(source)
        code = compile_fn(source.encode(), str(path))
        registry.register(str(path), code, source.encode())
        mod = types.ModuleType("__main__" if main else name)
        mod.__file__ = str(path)
        sys.modules[mod.__name__] = mod
        exec(code, mod.__dict__)
        return mod

    umod = module("umod", """
        import numpy as np
        class Model:
            def __init__(self, n):
                self.weights = np.arange(n, dtype=np.float32)
                self.view = self.weights[::2]
            def total(self):
                return float(self.weights.sum())
        def step(m, k):
            m.weights += k
            return m.total()
    """)
    main = module("__main__", """
        import umod
        history = []
        model = umod.Model(1000)
        def train(epochs):
            for e in range(epochs):
                history.append(umod.step(model, 1))
            return history
    """, main=True)
    modules = {"__main__": main, "umod": umod}
    ns = types.SimpleNamespace(registry=registry, modules=modules, main=main, umod=umod,
                               dir=tmp_path, sources=registry.sources())
    sys.modules["__main__"] = saved["__main__"]
    yield ns
    for key in list(sys.modules):
        if key not in saved:
            del sys.modules[key]
    sys.modules.update(saved)


def write(program, state, name="job", fields=None, roots=None, parent=None):
    fields = dict(fields or {})
    fields.setdefault("sources", program.sources)
    return write_checkpoint(parent or program.dir / "ck", name, state, roots, fields,
                            registry=program.registry, modules=program.modules)


def read(path, main=None):
    sys.modules.pop("umod", None)
    return read_checkpoint(path, Recompiler(compile_fn),
                           main_module=main or types.ModuleType("__main__"))


FIELDS = {"script": "train.py", "argv": ["train.py", "--lr", "0.1"],
          "error": {"type": "MemoryError", "message": "", "traceback": "Traceback ...",
                    "file": "train.py", "line": 12},
          "loop": {"file": "train.py", "line": 10, "iteration": 3}}


def recorded_digest(data, rec):
    """A file's digest as docs/checkpoint-format.md defines it, computed here from
    its bytes: sha256 of the whole file, or (version 3) blake3 of its chunks'
    blake3 digests (the module is checked against BLAKE3's published vectors in
    test_checkpoint_blake3.py)."""
    if "chunk" not in rec:
        return hashlib.sha256(data).hexdigest()
    n = rec["chunk"]
    return _blake3.digest(b"".join(_blake3.digest(data[i:i + n])
                                   for i in range(0, len(data), n))).hex()


def test_round_trip_and_layout(program):
    program.main.train(2)
    frame = {"locals": {"m": program.main.model, "h": program.main.history}}
    big = np.ones((512, 1024), dtype=np.float64)            # 4 MiB, its own region
    state = {"frames": [frame], "big": big, "small": [np.arange(i) for i in range(1, 5)]}
    info = write(program, state, fields=FIELDS)
    link = program.dir / "ck" / "job"
    assert info.path == str(link) and os.readlink(link) == "job.1"
    assert sorted(os.listdir(program.dir / "ck")) == ["job", "job.1"]
    gen = program.dir / "ck" / "job.1"
    text = (gen / "manifest.json").read_text()
    assert text.lstrip("{\n ").startswith('"format_version": 3')
    manifest = json.loads(text)
    assert manifest["format"] == "portal-checkpoint" and manifest["portal_version"]
    assert manifest["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert manifest["created"].endswith("Z")
    for key, value in FIELDS.items():
        assert manifest[key] == value
    total = os.path.getsize(gen / "manifest.json")
    for rel, rec in manifest["files"].items():
        data = (gen / rel).read_bytes()
        assert len(data) == rec["size"]
        assert recorded_digest(data, rec) == rec["blake3" if "chunk" in rec else "sha256"]
        assert ("chunk" in rec) == rel.startswith("blobs/")
        total += rec["size"]
    assert info.total_bytes == manifest["total_bytes"] == total
    assert all(off % 4096 == 0 for _, off, _ in manifest["buffers"])
    assert len(manifest["buffers"]) == 1 + 1 + 4                 # weights, big, smalls
    assert os.path.getsize(gen / "state.pickle") < 64 * 1024
    assert info.manifest == manifest

    main2 = types.ModuleType("__main__")
    manifest2, s = read(link, main2)
    assert manifest2 == manifest
    f = s["frames"][0]["locals"]
    assert f["m"] is main2.model and f["h"] is main2.history == [499500.0 + 1000, 499500.0 + 2000]
    assert main2.train(1)[-1] == 499500.0 + 3000             # the program goes on
    assert np.shares_memory(main2.model.view, main2.model.weights)
    assert np.array_equal(s["big"], big) and s["big"].flags.writeable
    s["big"][0, 0] = 7                                       # copy-on-write mapping
    assert np.array_equal(read(link)[1]["big"], big)
    assert [a.tolist() for a in s["small"]] == [list(range(i)) for i in range(1, 5)]

    write(program, {"second": True})
    assert os.readlink(link) == "job.2" and sorted(os.listdir(program.dir / "ck")) == ["job", "job.2"]
    assert read(link)[1] == {"second": True}


def test_reserved_and_unknown_fields(program):
    with pytest.raises(ValueError, match="reserved"):
        write(program, {}, fields={"files": {}})
    with pytest.raises(ValueError):
        write(program, {}, name="job.3")
    info = write(program, {"x": 1})
    path = os.path.join(os.path.realpath(info.path), "manifest.json")
    manifest = json.load(open(path))
    manifest["some_future_field"] = {"nested": [1, 2]}
    _write_signed(path, manifest)          # as a later writer would, with your key
    assert read(info.path)[1] == {"x": 1}


def _write_signed(path, manifest):
    with open(path, "w") as f:
        f.write(ckmanifest.signed_manifest_text(manifest, signing.load_key()))


def _edit_manifest(info, **changes):
    path = os.path.join(os.path.realpath(info.path), "manifest.json")
    manifest = json.load(open(path))
    manifest.update(changes)
    _write_signed(path, manifest)


def test_refuses_unknown_format_and_version(program):
    info = write(program, {"x": 1})
    _edit_manifest(info, format_version=7)
    with pytest.raises(CheckpointError) as e:
        read(info.path)
    assert str(e.value) == (f"checkpoint format version 7 is not supported by portal "
                            f"{ckformat.PORTAL_VERSION} (supports 1, 2, 3)")
    _edit_manifest(info, format_version=1, format="other-format")
    with pytest.raises(CheckpointError, match="unknown format 'other-format'"):
        read(info.path)
    _edit_manifest(info, format="portal-checkpoint", python={"version": "3.12.0", "magic": "cb0d0d0a"})
    with pytest.raises(CheckpointError, match="written by python 3.12.0"):
        read(info.path)


@pytest.mark.parametrize("damage", ["missing", "truncated", "grown", "corrupted",
                                    "state-corrupted", "manifest-missing", "manifest-bad"])
def test_refuses_damaged_files_before_unpickling(program, damage):
    info = write(program, {"m": program.main.model, "a": np.zeros(10000)})
    gen = os.path.realpath(info.path)
    blob = os.path.join(gen, "blobs", "0000.bin")
    size = os.path.getsize(blob)
    if damage == "missing":
        os.unlink(blob)
        expected = "checkpoint: blobs/0000.bin: missing"
    elif damage == "truncated":
        os.truncate(blob, 100)
        expected = f"checkpoint: blobs/0000.bin: size 100 != {size} recorded (truncated)"
    elif damage == "grown":
        with open(blob, "ab") as f:
            f.write(b"x")
        expected = (f"checkpoint: blobs/0000.bin: size {size + 1} != {size} recorded "
                    "(larger than recorded)")
    elif damage in ("corrupted", "state-corrupted"):
        target = blob if damage == "corrupted" else os.path.join(gen, "state.pickle")
        with open(target, "r+b") as f:
            f.seek(os.path.getsize(target) // 2)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0x40]))
        rel, digest = ("blobs/0000.bin", "blake3") if damage == "corrupted" else \
            ("state.pickle", "sha256")
        expected = f"checkpoint: {rel}: {digest} does not match the manifest (corrupted)"
    elif damage == "manifest-missing":
        os.unlink(os.path.join(gen, "manifest.json"))
        expected = "checkpoint: manifest.json: missing (not a checkpoint, or an incomplete one)"
    else:
        with open(os.path.join(gen, "manifest.json"), "r+") as f:
            f.truncate(40)
        # the signature is checked over the raw bytes, before any parsing
        expected = "checkpoint: manifest.json: carries no signature (hmac)"
    sys.modules["umod"] = sentinel = types.ModuleType("umod")
    with pytest.raises(CheckpointError) as e:
        read_checkpoint(info.path, Recompiler(compile_fn), main_module=types.ModuleType("m"))
    assert str(e.value).startswith(expected)
    assert str(e.value) == str(e.value).lower() or "Errno" in str(e.value)
    assert sys.modules["umod"] is sentinel                     # nothing was unpickled


def _gen(info):
    return os.path.realpath(info.path)


def _unsign(path):
    manifest = json.load(open(path))
    del manifest["hmac"]
    with open(path, "w") as f:
        json.dump(manifest, f, indent=1)


def _sign_with_another_key(path):
    manifest = json.load(open(path))
    with open(path, "w") as f:
        f.write(ckmanifest.signed_manifest_text(manifest, os.urandom(32)))


def _edit_in_place(path):
    """One byte of a recorded field changed, the signature kept."""
    text = open(path).read().replace('"iteration": 3', '"iteration": 4', 1)
    assert '"iteration": 4' in text
    open(path, "w").write(text)


def _swap_state(path):
    """A consistent forgery: another state.pickle, its size and sha256 recorded in the
    manifest, the old signature kept (the forger has not the key)."""
    gen = os.path.dirname(path)
    import pickle
    evil = pickle.dumps({"evil": True}, protocol=5)
    old = json.load(open(path))["files"]["state.pickle"]
    open(os.path.join(gen, "state.pickle"), "wb").write(evil)
    text = open(path).read().replace(old["sha256"], hashlib.sha256(evil).hexdigest())
    text = text.replace(f'"size": {old["size"]}', f'"size": {len(evil)}', 1)
    open(path, "w").write(text)


@pytest.mark.parametrize("tamper,says", [
    (_unsign, "checkpoint: manifest.json: carries no signature (hmac): it was not made by you "
              "with this portal, or it was edited"),
    (_sign_with_another_key, "checkpoint: manifest.json: its signature (hmac) is wrong: it was "
                             "not made by you (another key), or it was edited since"),
    (_edit_in_place, "checkpoint: manifest.json: its signature (hmac) is wrong"),
    (_swap_state, "checkpoint: manifest.json: its signature (hmac) is wrong"),
], ids=["unsigned", "other-key", "edited", "forged-state"])
def test_refuses_a_manifest_without_your_signature(program, tamper, says):
    info = write(program, {"m": program.main.model}, fields=FIELDS)
    tamper(os.path.join(_gen(info), "manifest.json"))
    sys.modules["umod"] = sentinel = types.ModuleType("umod")
    for reader in (lambda: read_checkpoint(info.path, Recompiler(compile_fn),
                                           main_module=types.ModuleType("m")),
                   lambda: ckread.read_manifest(info.path)):
        with pytest.raises(CheckpointError) as e:
            reader()
        assert str(e.value).startswith(says)
    assert sys.modules["umod"] is sentinel                     # nothing was unpickled


def test_the_signature_covers_every_byte_before_it(program):
    info = write(program, {"x": 1})
    path = os.path.join(_gen(info), "manifest.json")
    raw = open(path, "rb").read()
    assert raw.endswith(b'"\n}\n') and b',\n "hmac": "' in raw
    assert json.loads(raw)["hmac"] == info.manifest["hmac"]
    signed, tail = raw.split(b',\n "hmac": "')
    assert signing.sign(signing.load_key(), signed) == tail[:64].decode()
    assert info.total_bytes == sum(r["size"] for r in info.manifest["files"].values()) + len(raw)
    for i in range(0, len(signed), max(1, len(signed) // 40)):
        bad = bytearray(raw)
        bad[i] ^= 0x01 if chr(bad[i]).isalnum() else 0
        if bad == raw:
            continue
        with pytest.raises(CheckpointError) as e:
            ckmanifest.check_signature(bytes(bad))
        assert "signature (hmac)" in str(e.value)


def test_refuses_without_a_usable_key(program):
    info = write(program, {"x": 1})
    key_file = os.path.join(os.environ["PORTAL_HOME"], "key")
    saved = open(key_file, "rb").read()
    os.unlink(key_file)
    try:
        with pytest.raises(CheckpointError) as e:
            read(info.path)
        assert str(e.value) == (f"checkpoint: cannot be verified: you have no key ({key_file} "
                                f"is missing), so it was not made by you")
        assert not os.path.exists(key_file)                    # reading makes no key
        with open(key_file, "wb") as f:
            f.write(saved)
        os.chmod(key_file, 0o644)
        with pytest.raises(CheckpointError, match="cannot be verified: key: .* has mode 0644"):
            read(info.path)
        with pytest.raises(signing.SigningKeyError):           # and signs nothing either
            write(program, {"x": 2})
    finally:
        with open(key_file, "wb") as f:
            f.write(saved)
        os.chmod(key_file, 0o600)
    assert read(info.path)[1] == {"x": 1}


@pytest.mark.parametrize("target,mode,says", [
    ("manifest.json", 0o660, "checkpoint: manifest.json: is writable by your group (mode 0660)"),
    ("state.pickle", 0o606, "checkpoint: state.pickle: is writable by others (mode 0606)"),
    ("blobs/0000.bin", 0o666, "checkpoint: blobs/0000.bin: is writable by your group and others"),
    ("blobs", 0o770, "checkpoint: blobs/: is writable by your group (mode 0770)"),
    (".", 0o707, "is writable by others (mode 0707)"),
    ("..", 0o777, "is writable by your group and others (mode 0777)"),
], ids=["manifest", "state", "pack-file", "blobs-dir", "generation", "parent"])
def test_refuses_what_others_can_write(program, target, mode, says):
    info = write(program, {"a": np.zeros(1000)})
    path = os.path.join(_gen(info), target)
    before = os.stat(path).st_mode & 0o777
    os.chmod(path, mode)
    try:
        with pytest.raises(CheckpointError) as e:
            read(info.path)
        assert says in str(e.value) and str(e.value).startswith("checkpoint: ")
        assert "it is not trusted" in str(e.value)
    finally:
        os.chmod(path, before)
    assert read(info.path)[1]["a"].sum() == 0


def _pretend_owned_by(monkeypatch, path, uid):
    """Make os.stat/lstat/fstat report ``uid`` as the owner of ``path`` (nothing
    else changes): a stubbed owner, for where files cannot be given away."""
    target = os.path.abspath(path)
    real = {name: getattr(os, name) for name in ("stat", "lstat", "fstat")}

    def fake(name):
        def stat(p, *args, **kwargs):
            st = real[name](p, *args, **kwargs)
            where = os.readlink(f"/proc/self/fd/{p}") if name == "fstat" else os.path.abspath(p)
            if where == target:
                st = os.stat_result(tuple(st[:4]) + (uid,) + tuple(st[5:10]))
            return st
        return stat
    for name in real:
        monkeypatch.setattr(os, name, fake(name))


@pytest.mark.parametrize("target", ["manifest.json", "state.pickle", "blobs/0000.bin", "blobs",
                                    ".", "..", "link"])
@pytest.mark.parametrize("how", ["stubbed", "chown"])
def test_refuses_what_you_do_not_own(program, target, how, monkeypatch):
    info = write(program, {"a": np.zeros(1000)})
    path = info.path if target == "link" else os.path.join(_gen(info), target)
    me = os.geteuid()
    if how == "chown":
        if me != 0:
            pytest.skip("giving a file away needs root; the stubbed case checks the refusal")
        os.lchown(path, 65534, 65534)
    else:
        _pretend_owned_by(monkeypatch, path, me + 1000)
    owner = 65534 if how == "chown" else me + 1000
    sys.modules["umod"] = sentinel = types.ModuleType("umod")
    with pytest.raises(CheckpointError) as e:
        read_checkpoint(info.path, Recompiler(compile_fn), main_module=types.ModuleType("m"))
    assert str(e.value).startswith("checkpoint: ")
    assert f"is owned by uid {owner}, not by you (uid {me}); it is not trusted" in str(e.value)
    assert sys.modules["umod"] is sentinel
    if how == "chown":
        os.lchown(path, 0, 0)
    else:
        monkeypatch.undo()
    assert read(info.path)[1]["a"].sum() == 0


def test_refuses_symbolic_links_inside(program, tmp_path):
    info = write(program, {"a": np.zeros(1000)})
    gen = _gen(info)
    elsewhere = tmp_path / "elsewhere"
    os.rename(os.path.join(gen, "blobs"), elsewhere)
    os.symlink(elsewhere, os.path.join(gen, "blobs"))
    with pytest.raises(CheckpointError, match="checkpoint: blobs/: is a symbolic link; it is not trusted"):
        read(info.path)
    os.unlink(os.path.join(gen, "blobs"))
    os.rename(elsewhere, os.path.join(gen, "blobs"))
    os.rename(os.path.join(gen, "state.pickle"), tmp_path / "state")
    os.symlink(tmp_path / "state", os.path.join(gen, "state.pickle"))
    with pytest.raises(CheckpointError, match="checkpoint: state.pickle: is a symbolic link"):
        read(info.path)


def _modes(*roots):
    found = {}
    for root in roots:
        for path in [root] + sorted(root.rglob("*")):
            if not path.is_symlink():
                found[str(path)] = os.stat(path).st_mode & 0o777
    return found


def _not_private(found):
    return {p: f"{m:04o}" for p, m in found.items() if m != (0o700 if os.path.isdir(p) else 0o600)}


@pytest.mark.parametrize("umask", [0o000, 0o277])
def test_checkpoints_are_private_whatever_the_umask(program, umask):
    parent = program.dir / "new" / "ck"
    old = os.umask(umask)
    try:
        write(program, {"a": np.zeros(1000)}, parent=parent)
        write(program, {"a": np.ones(1000)}, parent=parent)      # over an existing one
    finally:
        os.umask(old)
    found = _modes(program.dir / "new")
    assert not _not_private(found)
    assert sum(p.endswith(".bin") for p in found) == 1 and len(found) == 7   # new, ck, job.2, blobs, 3 files


def test_the_job_store_is_private_under_umask_000(program):
    # jobs.py creates the job directory and record: also checked here, under the
    # umask that would open them most.
    from _portal.store import jobs
    old = os.umask(0)
    try:
        job = jobs.Job.create("train.py", home=str(program.dir / "home"))
        job.write_record({"state": "suspended"})
        write(program, {"a": np.zeros(1000)}, parent=job.dir, name="checkpoint")
    finally:
        os.umask(old)
    found = _modes(program.dir / "home")
    assert not _not_private(found)
    assert any(p.endswith("job.json") for p in found) and any(p.endswith(".bin") for p in found)


def test_refuses_changed_source(program):
    info = write(program, {"m": program.main.model})
    with open(program.umod.__file__, "a") as f:
        f.write("# edited\n")
    with pytest.raises(SourceChanged) as e:
        read(info.path)
    assert isinstance(e.value, CheckpointError) and isinstance(e.value, CodeChanged)
    assert e.value.filename == program.umod.__file__
    assert str(e.value).startswith(f"checkpoint: source file '{program.umod.__file__}' "
                                   "has changed since the checkpoint was written")
    # Not listed in the manifest: the recompiler itself notices.
    with pytest.raises(SourceChanged):
        sys.modules.pop("umod", None)
        read_checkpoint(info.path, Recompiler(compile_fn), check_sources=False,
                        main_module=types.ModuleType("m"))


def _no_temporaries(parent):
    return [e for e in os.listdir(parent) if e.startswith(".")]


def test_failures_leave_the_previous_checkpoint(program, monkeypatch):
    import socket
    parent = program.dir / "ck"
    info = write(program, {"gen": 1})
    # An object that cannot be saved.
    sock = socket.socket()
    try:
        with pytest.raises(Unsaveable) as e:
            write(program, {"s": {"conn": sock}}, roots={"global 'state'": {"conn": sock}})
        assert str(e.value) == ("global 'state'['conn'] (socket.socket): "
                                "cannot pickle 'socket' object")
    finally:
        sock.close()
    assert _no_temporaries(parent) == [] and sorted(os.listdir(parent)) == ["job", "job.1"]
    # A full disk, in the stream and in the blobs.
    for where in ("state", "blobs"):
        real_write = ckwrite._write
        written = []

        def full(fd, data, where=where):
            path = os.readlink(f"/proc/self/fd/{fd}")
            if (where == "state") == path.endswith("state.pickle") and \
                    sum(written) + len(data) > 4096:
                raise OSError(errno.ENOSPC, "No space left on device")
            written.append(len(data))
            return real_write(fd, data)
        real_pwrite = ckwrite._pwrite
        pwritten, raised = [], []

        def full_at(fd, data, offset, where=where):       # the pack files' writes
            if where == "blobs" and sum(pwritten) + len(data) > 4096:
                raised.append(fd)
                raise OSError(errno.ENOSPC, "No space left on device")
            pwritten.append(len(data))
            return real_pwrite(fd, data, offset)
        monkeypatch.setattr(ckwrite, "_write", full)
        monkeypatch.setattr(ckwrite, "_pwrite", full_at)
        big = {"pad": [bytes(1000) for _ in range(20)], "a": np.ones(100000)}
        with pytest.raises(OSError) as e:
            write(program, big)
        assert e.value.errno == errno.ENOSPC and not isinstance(e.value, Unsaveable)
        assert (where == "blobs") == bool(raised)         # the blobs' own write failed
        monkeypatch.setattr(ckwrite, "_write", real_write)
        monkeypatch.setattr(ckwrite, "_pwrite", real_pwrite)
        assert _no_temporaries(parent) == [] and sorted(os.listdir(parent)) == ["job", "job.1"]
    # Out of memory while saving.
    with pytest.raises(MemoryError):
        write_checkpoint(parent, "job", {"x": threading}, None, {},
                         registry=program.registry, modules=program.modules,
                         reducers={types.ModuleType: _raise_memory_error})
    assert _no_temporaries(parent) == [] and read(info.path)[1] == {"gen": 1}


def _raise_memory_error(obj):
    raise MemoryError()


def test_enospc_on_a_tiny_filesystem(program, tmp_path):
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(mnt)],
                       capture_output=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (the monkeypatched ENOSPC test covers it)")
    try:
        write(program, {"small": np.ones(1000)}, parent=mnt)
        with pytest.raises(OSError) as e:
            write(program, {"big": np.ones(3 * 2**20 // 8)}, parent=mnt)
        assert e.value.errno == errno.ENOSPC
        assert sorted(os.listdir(mnt)) == ["job", "job.1"]
        assert read(mnt / "job")[1]["small"].sum() == 1000
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_stale_temporaries_of_dead_writers_are_removed(program):
    parent = program.dir / "ck"
    write(program, {"gen": 1})
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = parent / f".job.tmp-{dead.pid}-xyz"
    (stale / "blobs").mkdir(parents=True)
    orphan = parent / "job.7"                  # committed by nobody
    orphan.mkdir()
    live = parent / f".job.tmp-{os.getppid()}-abc"   # a live writer's: kept
    live.mkdir()
    write(program, {"gen": 2})
    names = sorted(os.listdir(parent))
    assert names == sorted(["job", "job.8", live.name])
    assert read(parent / "job")[1] == {"gen": 2}


SIZES = (256 << 10, 128 << 10, 10, 128 << 10)       # int64: 4 MiB in four buffers


def _writer(parent, marker, delay=None):
    """Write checkpoint ``parent/job`` holding ``marker`` in a forked child (fast
    to start, so that many kills stay cheap); with ``delay``, SIGKILL the child
    that long after it starts writing.  Returns (killed, seconds the write took)."""
    state = {"marker": marker, "arrays": [np.full(n, marker, dtype=np.int64) for n in SIZES]}
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:                                             # the writer
        try:
            os.close(ready_r)
            os.write(ready_w, b"go")
            write_checkpoint(parent, "job", state, None, {"marker": marker},
                             registry=CodeRegistry(), modules={})
            os._exit(0)
        except BaseException:
            os._exit(1)
    os.close(ready_w)
    try:
        assert os.read(ready_r, 2) == b"go"
    finally:
        os.close(ready_r)
    start = time.perf_counter()
    if delay is not None:
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    took = time.perf_counter() - start
    if delay is None:
        assert os.waitstatus_to_exitcode(status) == 0
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, took


def _current_marker(parent):
    """The marker of the checkpoint ``parent/job``, verified whole (signature,
    sizes, checksums, every value), or None if there is none."""
    if not os.path.lexists(parent / "job"):
        return None
    manifest, state = read_checkpoint(parent / "job", None, main_module=types.ModuleType("m"))
    got = manifest["marker"]
    assert state["marker"] == got
    assert [a.size for a in state["arrays"]] == list(SIZES)
    assert all((a == got).all() for a in state["arrays"])
    return got


def test_atomic_commit_survives_sigkill_anywhere(tmp_path):
    """SIGKILL a writer at 40 moments spread over a 4 MiB write, over no
    checkpoint and over an existing one: reading always gives the previous
    complete checkpoint or the new complete one, never a partial one, and what
    the killed writers left is removed by the next write."""
    parent = tmp_path / "ck"
    outcomes = []

    def kill_at(marker, fraction, last):
        killed, _ = _writer(parent, marker, duration * fraction)
        got = _current_marker(parent)
        assert got in (last, marker), (got, last, marker, fraction)
        outcomes.append((round(fraction, 2), killed, got == marker))
        return got

    # How long a write over an existing checkpoint takes here (median of 3).
    calibrate = tmp_path / "calibrate"
    duration = sorted(_writer(calibrate, m)[1] for m in range(4))[1:][1]
    rng = random.Random(1234)
    # The first generation: nothing before it.
    last = None
    for i, fraction in enumerate((0.1, 0.4, 0.7, 1.0)):
        last = kill_at(100 + i, fraction, last)
    _writer(parent, 0)
    last = 0
    # Over an existing checkpoint, at moments spread over the whole write (and a
    # little past it); a complete write every 9 kills must leave nothing else.
    marker = 0
    for stratum in range(36):
        marker += 1
        last = kill_at(marker, 1.4 * (stratum + rng.random()) / 36, last)
        if stratum % 9 == 8:
            marker += 1
            _writer(parent, marker)
            last = _current_marker(parent)
            assert last == marker
            assert sorted(os.listdir(parent)) == ["job", os.readlink(parent / "job")]
    print(f"write {duration:.3f} s; kills (fraction, killed, new): {outcomes}")
    killed_old = sum(1 for _, killed, new in outcomes if killed and not new)
    # Kills landed before the commit point, and the moments reached past it (a
    # kill there finds the write done, or lands between the commit and the exit).
    assert len(outcomes) == 40 and killed_old >= 10
    assert any(new for _, _, new in outcomes), "no write ever reached its commit point"



CRASHER = r"""
import os, shutil, sys
sys.path.insert(0, {pydir!r})
import numpy as np
from _portal.checkpoint.write import write_checkpoint
from _portal.run.codeindex import CodeRegistry
parent, marker, point = sys.argv[1], int(sys.argv[2]), sys.argv[3]
renames = []
real_rename, real_rmtree = os.rename, shutil.rmtree

def rename(src, dst):
    renames.append(dst)
    if point == "before-dir-rename" and len(renames) == 1:
        os._exit(9)
    if point == "before-link-rename" and len(renames) == 2:
        os._exit(9)
    real_rename(src, dst)
    if point == "after-link-rename" and len(renames) == 2:
        os._exit(9)

def rmtree(path, *a, **k):
    if point == "before-old-removal" and not os.path.basename(path).startswith("."):
        os._exit(9)
    real_rmtree(path, *a, **k)

os.rename, shutil.rmtree = rename, rmtree
write_checkpoint(parent, "job", {{"a": np.full(1000, marker)}}, None, {{"marker": marker}},
                 registry=CodeRegistry(), modules={{}})
"""


@pytest.mark.parametrize("point,survivor", [("before-dir-rename", "old"),
                                            ("before-link-rename", "old"),
                                            ("after-link-rename", "new"),
                                            ("before-old-removal", "new")])
def test_crash_at_each_commit_step(tmp_path, point, survivor):
    script = tmp_path / "crasher.py"
    script.write_text(CRASHER.format(pydir=PYDIR))
    parent = tmp_path / "ck"
    write_checkpoint(parent, "job", {"a": np.full(1000, 1)}, None, {"marker": 1},
                     registry=CodeRegistry(), modules={})
    r = subprocess.run([sys.executable, str(script), str(parent), "2", point])
    assert r.returncode == 9
    manifest, state = read_checkpoint(parent / "job", None, main_module=types.ModuleType("m"))
    expected = 1 if survivor == "old" else 2
    assert manifest["marker"] == expected and (state["a"] == expected).all()
    write_checkpoint(parent, "job", {"a": np.full(1000, 3)}, None, {"marker": 3},
                     registry=CodeRegistry(), modules={})
    names = os.listdir(parent)
    assert len(names) == 2 and "job" in names and os.readlink(parent / "job") in names


# --- issue 10: the reader validates everything, and binds a checkpoint to its job ----

def _resign(info, change):
    """Apply ``change`` to the manifest and sign it again with the user's key (a
    user's own damaged manifest: the signature is valid, the content is not)."""
    path = os.path.join(_gen(info), "manifest.json")
    manifest = json.load(open(path))
    change(manifest)
    with open(path, "w") as f:
        f.write(ckmanifest.signed_manifest_text(manifest, signing.load_key()))


def test_a_checkpoint_is_bound_to_its_job(program):
    info = write(program, {"a": np.arange(1000)}, fields={"job_id": "train-aaaaaa"})
    manifest, state = read_checkpoint(info.path, Recompiler(compile_fn), job_id="train-aaaaaa",
                                      main_module=types.ModuleType("m"))
    assert manifest["job_id"] == "train-aaaaaa" and state["a"].sum() == 499500
    with pytest.raises(CheckpointError) as e:
        ckread.read_manifest(info.path, job_id="train-bbbbbb")
    assert str(e.value) == ("checkpoint: it belongs to job train-aaaaaa, not train-bbbbbb "
                            "(replayed or moved)")
    unbound = write(program, {"a": 1}, name="other")
    with pytest.raises(CheckpointError) as e:
        ckread.read_manifest(unbound.path, job_id="train-bbbbbb")
    assert "it names no job" in str(e.value)


@pytest.mark.parametrize("change, says", [
    (lambda m: m["files"].update({"../../key": {"size": 32, "sha256": "0" * 64}}),
     "names a file '../../key', which is not one of a checkpoint's"),
    (lambda m: m["files"].update({"/etc/passwd": {"size": 1, "sha256": "0" * 64}}),
     "names a file '/etc/passwd'"),
    (lambda m: m["buffers"][0].__setitem__(1, 8), "not 4096-aligned"),
    (lambda m: m["buffers"].append(list(m["buffers"][0])), "the buffer table is damaged"),
    (lambda m: m["buffers"].reverse(), "not where the writer puts it"),
    (lambda m: m["buffers"][0].__setitem__(0, "state.pickle"), "not a recorded pack file"),
    (lambda m: m["files"]["state.pickle"].__setitem__("size", True), "bad entry for 'state.pickle'"),
    (lambda m: m.__setitem__("runtime", {"main_filename": 5}), "bad runtime context"),
], ids=["dotdot", "absolute", "misaligned", "duplicate", "reordered", "in-state", "bool-size",
        "runtime"])
def test_a_re_signed_damaged_manifest_is_refused(program, change, says):
    info = write(program, {"a": np.arange(1000), "b": np.ones(3000)})
    _resign(info, change)
    with pytest.raises(CheckpointError) as e:
        read(info.path)
    assert str(e.value).startswith("checkpoint: manifest.json: ") and says in str(e.value)


def test_a_fifo_manifest_is_refused_without_waiting(program):
    info = write(program, {"a": 1})
    path = os.path.join(_gen(info), "manifest.json")
    os.unlink(path)
    os.mkfifo(path, 0o600)
    start = time.monotonic()
    with pytest.raises(CheckpointError) as e:
        read(info.path)
    assert time.monotonic() - start < 5
    assert str(e.value) == ("checkpoint: manifest.json: is not a regular file (a fifo); "
                            "it is not trusted")


def test_the_signature_is_checked_before_the_text_is_parsed(program, monkeypatch):
    info = write(program, {"a": 1})
    path = os.path.join(_gen(info), "manifest.json")
    with open(path, "a") as f:
        f.write(" ")
    parsed = []
    monkeypatch.setattr(ckmanifest, "parse_manifest", lambda raw: parsed.append(raw))
    with pytest.raises(CheckpointError) as e:
        read(info.path)
    assert "signature" in str(e.value) and parsed == []


# --- restore.start: every failure before the program continues is a ResumeError -----

def test_a_resume_failure_is_one_resume_error_never_a_traceback(program, monkeypatch):
    from _portal.restore import resume as restore
    job_dir = program.dir / "jobs" / "train-abcdef"
    info = write(program, {"a": 1}, name="checkpoint", parent=job_dir,
                 fields={"job_id": "train-abcdef",
                         "runtime": {"main_filename": str(program.dir / "src" / "umod.py"),
                                     "cwd": str(program.dir), "environ": {}, "user_code": [],
                                     "policy": {}}})
    assert info.path == str(job_dir / "checkpoint")
    monkeypatch.chdir(program.dir)
    # restore.start sets the job's PYTHONPATH and fixture in os.environ, as a resume
    # must: this process's own are given back afterwards (later tests start children)
    for name in ("PYTHONPATH", "PORTAL_FAKE_OOM"):
        if name in os.environ:
            monkeypatch.setenv(name, os.environ[name])
        else:
            monkeypatch.delenv(name, raising=False)

    def broken_runtime(*args, **kwargs):
        raise KeyError("boom")
    with pytest.raises(restore.ResumeError) as e:
        restore.start(str(job_dir), broken_runtime)
    assert str(e.value).startswith("it failed before the program continued (KeyError: 'boom' at ")
    # another job's directory: refused as a replay, before any runtime is made
    other = program.dir / "jobs" / "train-000000"
    other.mkdir(mode=0o700)
    os.symlink(os.path.realpath(info.path), other / "checkpoint")
    with pytest.raises(restore.ResumeError) as e:
        restore.start(str(other), broken_runtime)
    assert "checkpoint: " in str(e.value)


@pytest.mark.parametrize("threads", [0, 1])
def test_written_and_read_when_threads_cannot_start(program, monkeypatch, threads):
    """A rescue short of memory may not start a thread (its stack is address space
    the tripwire's cap refuses: "can't start new thread"): the threads that did
    start, or else the calling thread, write and read every chunk."""
    started = []
    real_start = threading.Thread.start

    def start(self):
        if self.name.startswith(("portal-write", "portal-read")):
            if sum(n.split("_")[0] == self.name.split("_")[0] for n in started) >= threads:
                raise RuntimeError("can't start new thread")
            started.append(self.name)
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    big = np.arange(3 << 20, dtype=np.float64)               # 24 MiB: several chunks
    info = write(program, {"big": big, "small": np.ones(5)})
    assert len(started) == threads
    _, state = read(info.path)
    assert np.array_equal(state["big"], big) and np.array_equal(state["small"], np.ones(5))
    assert len(started) == 2 * threads
    assert not [t for t in threading.enumerate() if t.name.startswith(("portal-write", "portal-read"))]
