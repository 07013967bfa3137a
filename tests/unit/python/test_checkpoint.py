"""_portal.checkpoint: the on-disk format, its atomic commit and its refusals."""
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
from _portal import checkpoint, signing
from _portal.checkpoint import CheckpointError, SourceChanged, read_checkpoint, write_checkpoint
from _portal.codeindex import CodeChanged, CodeRegistry, Recompiler
from _portal.reducers import Unsaveable

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
    assert text.lstrip("{\n ").startswith('"format_version": 1')
    manifest = json.loads(text)
    assert manifest["format"] == "portal-checkpoint" and manifest["portal_version"]
    assert manifest["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert manifest["created"].endswith("Z")
    for key, value in FIELDS.items():
        assert manifest[key] == value
    total = os.path.getsize(gen / "manifest.json")
    for rel, rec in manifest["files"].items():
        data = (gen / rel).read_bytes()
        assert len(data) == rec["size"] and hashlib.sha256(data).hexdigest() == rec["sha256"]
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
        f.write(checkpoint.signed_manifest_text(manifest, signing.load_key()))


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
                            f"{checkpoint.PORTAL_VERSION} (supports 1)")
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
        rel = "blobs/0000.bin" if damage == "corrupted" else "state.pickle"
        expected = f"checkpoint: {rel}: sha256 does not match the manifest (corrupted)"
    elif damage == "manifest-missing":
        os.unlink(os.path.join(gen, "manifest.json"))
        expected = "checkpoint: manifest.json: missing (not a checkpoint, or an incomplete one)"
    else:
        with open(os.path.join(gen, "manifest.json"), "r+") as f:
            f.truncate(40)
        expected = "checkpoint: manifest.json: corrupted (not valid json"
    sys.modules["umod"] = sentinel = types.ModuleType("umod")
    with pytest.raises(CheckpointError) as e:
        read_checkpoint(info.path, Recompiler(compile_fn), main_module=types.ModuleType("m"))
    assert str(e.value).startswith(expected)
    assert str(e.value) == str(e.value).lower() or "Errno" in str(e.value)
    assert sys.modules["umod"] is sentinel                     # nothing was unpickled


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
        real_write = checkpoint._write
        written = []

        def full(fd, data, where=where):
            path = os.readlink(f"/proc/self/fd/{fd}")
            if (where == "state") == path.endswith("state.pickle") and \
                    sum(written) + len(data) > 4096:
                raise OSError(errno.ENOSPC, "No space left on device")
            written.append(len(data))
            return real_write(fd, data)
        monkeypatch.setattr(checkpoint, "_write", full)
        big = {"pad": [bytes(1000) for _ in range(20)], "a": np.ones(100000)}
        with pytest.raises(OSError) as e:
            write(program, big)
        assert e.value.errno == errno.ENOSPC and not isinstance(e.value, Unsaveable)
        monkeypatch.setattr(checkpoint, "_write", real_write)
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


WRITER = r"""
import os, sys, time
sys.path.insert(0, {pydir!r})
import numpy as np
from _portal.checkpoint import write_checkpoint
from _portal.codeindex import CodeRegistry
parent, marker = sys.argv[1], int(sys.argv[2])
state = {{"marker": marker,
          "arrays": [np.full(n, marker, dtype=np.int64) for n in (3 << 20, 1 << 20, 10, 2 << 20)]}}
print("go", flush=True)
t = time.perf_counter()
write_checkpoint(parent, "job", state, None, {{"marker": marker}}, registry=CodeRegistry(),
                 modules={{}})
print("done", time.perf_counter() - t, flush=True)
"""


def test_atomic_commit_survives_sigkill_anywhere(tmp_path):
    """SIGKILL a writer at 20 random moments of a 48 MiB write; the checkpoint is
    always the previous complete one or the new complete one."""
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(pydir=PYDIR))
    parent = tmp_path / "ck"

    def run(marker, delay=None):
        p = subprocess.Popen([sys.executable, str(script), str(parent), str(marker)],
                             stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "go"
        if delay is None:
            line = p.stdout.readline()
            p.wait()
            return float(line.split()[1])
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait()
        return p.returncode

    duration = run(0)                         # the previous checkpoint; calibrates
    rng = random.Random(1234)
    last, outcomes = 0, []
    for marker in range(1, 21):
        rc = run(marker, rng.uniform(0, duration * 1.3))
        manifest, state = read_checkpoint(parent / "job", None, main_module=types.ModuleType("m"))
        got = manifest["marker"]
        assert got in (last, marker), (got, last, marker)
        assert state["marker"] == got
        assert [a.size for a in state["arrays"]] == [3 << 20, 1 << 20, 10, 2 << 20]
        assert all((a == got).all() for a in state["arrays"])
        outcomes.append((rc, got == marker))
        last = got
    print("kills:", outcomes)
    assert any(new for _, new in outcomes) or duration < 0.05
    assert sum(1 for rc, new in outcomes if rc == -signal.SIGKILL and not new) > 0


CRASHER = r"""
import os, shutil, sys
sys.path.insert(0, {pydir!r})
import numpy as np
from _portal.checkpoint import write_checkpoint
from _portal.codeindex import CodeRegistry
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
