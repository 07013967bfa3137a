"""The page-cache behaviour of checkpoint writes and reads (python/_portal/checkpoint/format.py):
pack files are written behind (bounded dirty cache), and restored arrays are read
into their own memory.  Speed itself: bench/checkpoint_io.py."""
import ctypes
import mmap
import os
import types

import numpy as np
import pytest

from _portal.checkpoint import write as ckwrite
from _portal.checkpoint.read import read_checkpoint
from _portal.checkpoint.write import write_checkpoint
from _portal.run.codeindex import CodeRegistry

MIB = 1 << 20


def fstype(path):
    """Filesystem type of the mount holding ``path`` (longest mount point prefix)."""
    path = os.path.realpath(path)
    best, kind = "", None
    with open("/proc/mounts") as f:
        for line in f:
            _, point, fs = line.split()[:3]
            if (path == point or path.startswith(point.rstrip("/") + "/")) and \
                    len(point) >= len(best):
                best, kind = point, fs
    return kind


def resident_bytes(path):
    """Bytes of ``path`` in the page cache, through mincore(2)."""
    size = os.path.getsize(path)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value)
        page = os.sysconf("SC_PAGE_SIZE")
        vec = ctypes.create_string_buffer(-(-size // page))
        assert libc.mincore(addr, size, vec) == 0, os.strerror(ctypes.get_errno())
        libc.munmap(addr, size)
    finally:
        os.close(fd)
    return sum(b & 1 for b in vec.raw) * page


def test_pack_files_are_written_behind(tmp_path, monkeypatch):
    if fstype(tmp_path) in ("tmpfs", "ramfs", None):
        pytest.skip(f"{tmp_path} is on {fstype(tmp_path)}: its pages cannot leave memory")
    if ckwrite._sync_file_range() is None:
        pytest.skip("no sync_file_range in this libc")
    monkeypatch.setattr(ckwrite, "FLUSH_BYTES", 1 * MIB)
    data = np.arange(32 * MIB // 8, dtype=np.int64)
    write_checkpoint(tmp_path, "job", {"a": data}, None, {}, registry=CodeRegistry(),
                     modules={})
    pack = tmp_path / "job" / "blobs" / "0000.bin"
    assert os.path.getsize(pack) == 32 * MIB
    # Without write-behind all 32 MiB stay cached after the fsync; with it, about
    # the last window (the one before was dropped once written back).
    assert resident_bytes(pack) <= 4 * MIB
    _, state = read_checkpoint(tmp_path / "job", None, main_module=types.ModuleType("m"),
                               check_sources=False)
    assert np.array_equal(state["a"], data)


def mapping_smaps(path):
    """The smaps fields (kB) of this process's mapping of ``path``."""
    fields, inside = {}, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):
                inside = line.rstrip("\n").endswith(str(path))
            elif inside and head[0].endswith(":") and len(head) >= 2 and head[1].isdigit():
                fields[head[0][:-1]] = int(head[1])
    return fields


def test_restored_arrays_are_read_into_their_own_memory(tmp_path):
    """The pack files are read into anonymous memory the arrays are built on: no
    mapping of (nor descriptor on) a pack file is left, writing the arrays does
    not touch the files, and their pages are the process's own at once."""
    data = np.arange(8 * MIB // 8, dtype=np.int64)
    write_checkpoint(tmp_path, "job", {"a": data}, None, {}, registry=CodeRegistry(),
                     modules={})
    pack = os.path.realpath(tmp_path / "job" / "blobs" / "0000.bin")
    _, state = read_checkpoint(tmp_path / "job", None, main_module=types.ModuleType("m"),
                               check_sources=False)
    assert mapping_smaps(pack) == {}
    open_files = [os.path.realpath(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")]
    assert pack not in open_files
    assert state["a"].flags.writeable and np.array_equal(state["a"], data)
    state["a"] += 1
    assert np.array_equal(state["a"], data + 1)
    with open(pack, "rb") as f:                     # the file itself is unchanged
        assert np.array_equal(np.frombuffer(f.read(), dtype=np.int64), data)
