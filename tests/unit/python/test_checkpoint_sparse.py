"""Sparse checkpoints and chunk digests (format version 3, python/_portal/checkpoint/format.py):
all-zero pages are holes in the pack files and are not read back; every chunk's
digest is checked, a hole's too; damaged, holed, filled or truncated files are
refused; version-1 and version-2 checkpoints are still read, and version 3 is
refused by name where it cannot be verified.  Format: docs/checkpoint-format.md."""
import ctypes
import hashlib
import json
import os
import subprocess
import types

import numpy as np
import pytest

from _portal import _blake3
from _portal.checkpoint import format as ckformat, hashing as ckhash, manifest as ckmanifest, read as ckread
from _portal.store import signing
from _portal.checkpoint.format import CheckpointError
from _portal.checkpoint.read import read_checkpoint
from _portal.checkpoint.write import write_checkpoint
from _portal.run.codeindex import CodeRegistry

MIB = 1 << 20
PAGE = 4096


def write(parent, state):
    return write_checkpoint(parent, "job", state, None, {}, registry=CodeRegistry(), modules={})


def read(parent):
    return read_checkpoint(os.path.join(parent, "job"), None,
                           main_module=types.ModuleType("m"), check_sources=False)


def pack(parent, n=0):
    return os.path.join(os.path.realpath(os.path.join(parent, "job")), "blobs", f"{n:04d}.bin")


def manifest_of(parent):
    with open(os.path.join(os.path.realpath(os.path.join(parent, "job")), "manifest.json")) as f:
        return json.load(f)


def stored_bytes(path):
    return os.stat(path).st_blocks * 512


def resident_bytes(array):
    """Bytes of ``array``'s memory that are resident (mincore(2) on its pages)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
    start = array.ctypes.data // PAGE * PAGE
    length = array.ctypes.data + array.nbytes - start
    vec = ctypes.create_string_buffer(-(-length // PAGE))
    assert libc.mincore(start, length, vec) == 0, os.strerror(ctypes.get_errno())
    return sum(b & 1 for b in vec.raw) * PAGE


def chunked_sha256(data, chunk):
    """The version-2 digest of a pack file, computed here from its bytes."""
    return hashlib.sha256(b"".join(hashlib.sha256(data[i:i + chunk]).digest()
                                   for i in range(0, len(data), chunk))).hexdigest()


def chunked_blake3(data, chunk):
    """The version-3 digest of a pack file, computed here from its bytes (the
    module is checked against BLAKE3's published vectors: test_checkpoint_blake3.py)."""
    return _blake3.digest(b"".join(_blake3.digest(data[i:i + chunk])
                                   for i in range(0, len(data), chunk))).hex()


def sparse_array():
    """64 MiB of zeros with three touched pages, far apart."""
    a = np.zeros(64 * MIB, dtype=np.uint8)
    for at in (0, 20 * MIB + 5, 64 * MIB - 1):
        a[at] = 1 + at % 250
    return a


def test_zero_pages_are_holes_and_read_back_as_zeros(tmp_path):
    dense = np.random.default_rng(1).integers(0, 255, 3 * MIB, dtype=np.uint8)
    sparse = sparse_array()
    write(tmp_path, {"dense": dense, "sparse": sparse, "tail": np.arange(10)})
    files = manifest_of(tmp_path)["files"]
    size = files["blobs/0000.bin"]["size"]
    assert size >= sparse.nbytes + dense.nbytes
    # the dense bytes, three pages of the sparse array, the small tail: nothing else
    assert stored_bytes(pack(tmp_path)) <= dense.nbytes + 3 * PAGE + 2 * PAGE + 64 * 1024
    with open(pack(tmp_path), "rb") as f:
        data = f.read()
    assert files["blobs/0000.bin"]["blake3"] == chunked_blake3(data, ckformat.CHUNK_BYTES)
    _, state = read(tmp_path)
    assert np.array_equal(state["sparse"], sparse) and np.array_equal(state["dense"], dense)
    assert np.array_equal(state["tail"], np.arange(10))


def test_holes_are_not_read_into_memory(tmp_path):
    sparse = sparse_array()
    write(tmp_path, {"sparse": sparse})
    _, state = read(tmp_path)
    # chunks that lie in holes are never read: their pages stay untouched
    assert resident_bytes(state["sparse"]) <= 3 * ckformat.CHUNK_BYTES  # the 3 touched
    assert int(state["sparse"].sum()) == int(sparse.sum())
    state["sparse"][30 * MIB] = 9                  # and are the process's own memory
    assert state["sparse"][30 * MIB] == 9


def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_untouched_zeros_cost_neither_disk_nor_memory(tmp_path):
    untouched = np.zeros(256 * MIB, dtype=np.uint8)      # never written: no pages
    before = rss()
    write(tmp_path, {"z": untouched})
    # the zero scan reads the shared zero page: the process does not grow
    assert rss() - before <= 32 * MIB
    assert stored_bytes(pack(tmp_path)) <= 64 * 1024
    before = rss()
    _, state = read(tmp_path)
    assert rss() - before <= 32 * MIB
    assert state["z"].shape == untouched.shape and not state["z"][::PAGE].any()


def test_the_digest_of_a_hole_chunk_is_that_of_zeros():
    for n in (1, PAGE, ckformat.CHUNK_BYTES, ckformat.CHUNK_BYTES - 17):
        assert ckhash.zero_digest(n) == hashlib.sha256(bytes(n)).digest()
        assert ckhash.zero_digest(n, ckhash.SHA256) == hashlib.sha256(bytes(n)).digest()
        assert ckhash.zero_digest(n, ckhash.BLAKE3) == _blake3.digest(bytes(n))


def refused(tmp_path, match):
    with pytest.raises(CheckpointError, match=match):
        read(tmp_path)


def test_a_damaged_chunk_is_refused(tmp_path):
    write(tmp_path, {"sparse": sparse_array()})
    with open(pack(tmp_path), "r+b") as f:
        f.seek(20 * MIB + 5)
        f.write(b"\xff")
    refused(tmp_path, r"checkpoint: blobs/0000\.bin: blake3 does not match the manifest")


def test_data_written_into_a_hole_is_refused(tmp_path):
    write(tmp_path, {"sparse": sparse_array()})
    with open(pack(tmp_path), "r+b") as f:
        f.seek(40 * MIB)
        f.write(b"\x01" * PAGE)
    refused(tmp_path, r"checkpoint: blobs/0000\.bin: blake3 does not match the manifest")


def test_a_hole_punched_into_data_is_refused(tmp_path):
    dense = np.random.default_rng(2).integers(1, 255, 8 * MIB, dtype=np.uint8)
    write(tmp_path, {"dense": dense})
    r = subprocess.run(["fallocate", "--punch-hole", "--offset", str(4 * MIB), "--length",
                        str(ckformat.CHUNK_BYTES), pack(tmp_path)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"fallocate --punch-hole is not supported here: {r.stderr.decode().strip()}")
    assert stored_bytes(pack(tmp_path)) < dense.nbytes
    refused(tmp_path, r"checkpoint: blobs/0000\.bin: blake3 does not match the manifest")


def test_a_truncated_or_extended_pack_file_is_refused(tmp_path):
    write(tmp_path, {"sparse": sparse_array()})
    size = os.path.getsize(pack(tmp_path))
    os.truncate(pack(tmp_path), size - PAGE)
    refused(tmp_path, rf"checkpoint: blobs/0000\.bin: size {size - PAGE} != {size} "
                      rf"recorded \(truncated\)")
    os.truncate(pack(tmp_path), size + PAGE)           # zeros: a hole, still refused
    refused(tmp_path, r"larger than recorded")


def resign(parent, manifest):
    path = os.path.join(os.path.realpath(os.path.join(parent, "job")), "manifest.json")
    with open(path, "w") as f:
        f.write(ckmanifest.signed_manifest_text(manifest, signing.load_key()))


def test_a_version_1_checkpoint_is_still_read(tmp_path):
    data = np.arange(3 * MIB, dtype=np.int32)
    write(tmp_path, {"a": data})
    manifest = manifest_of(tmp_path)
    manifest["format_version"] = 1
    for rel, rec in manifest["files"].items():
        if rec.pop("chunk", None) is not None:
            del rec["blake3"]
            with open(pack(tmp_path), "rb") as f:
                rec["sha256"] = hashlib.sha256(f.read()).hexdigest()
    resign(tmp_path, manifest)
    _, state = read(tmp_path)
    assert np.array_equal(state["a"], data)
    with open(pack(tmp_path), "r+b") as f:             # and still verified
        f.seek(5)
        f.write(b"\x07")
    refused(tmp_path, r"checkpoint: blobs/0000\.bin: sha256 does not match the manifest")


def as_version_2(parent):
    """The checkpoint at ``parent`` re-recorded as the previous writer made it:
    format version 2, pack files digested by sha256 chunks (re-signed)."""
    manifest = manifest_of(parent)
    assert manifest["format_version"] == 3
    manifest["format_version"] = 2
    for rel, rec in manifest["files"].items():
        if "chunk" in rec:
            del rec["blake3"]
            with open(pack(parent, int(rel[6:10])), "rb") as f:
                rec["sha256"] = chunked_sha256(f.read(), rec["chunk"])
    resign(parent, manifest)


def test_a_version_2_checkpoint_is_still_read(tmp_path):
    dense = np.random.default_rng(3).integers(0, 255, 9 * MIB, dtype=np.uint8)
    sparse = sparse_array()
    write(tmp_path, {"dense": dense, "sparse": sparse})
    as_version_2(tmp_path)
    _, state = read(tmp_path)
    assert resident_bytes(state["sparse"]) <= 3 * ckformat.CHUNK_BYTES   # holes not read
    assert np.array_equal(state["dense"], dense) and np.array_equal(state["sparse"], sparse)
    with open(pack(tmp_path), "r+b") as f:             # and still verified, by sha256
        f.seek(5 * MIB + 3)
        f.write(b"\x07")
    refused(tmp_path, r"checkpoint: blobs/0000\.bin: sha256 does not match the manifest")


def test_a_version_3_checkpoint_is_refused_by_name_without_blake3(tmp_path, monkeypatch):
    write(tmp_path, {"a": np.arange(1000)})
    monkeypatch.setattr(ckhash, "BLAKE3", ckhash.ChunkHash("blake3", None))
    refused(tmp_path, r"^checkpoint format version 3 \(pack files hashed with blake3\) needs "
                      r"portal's native module _portal\._blake3, which this build of portal "
                      r"\S+ lacks$")
    with pytest.raises(CheckpointError, match=r"needs portal's native module _portal\._blake3"):
        ckread.read_manifest(os.path.join(tmp_path, "job"))


def test_a_digest_under_the_other_versions_name_is_refused(tmp_path):
    write(tmp_path, {"a": np.arange(1000)})
    manifest = manifest_of(tmp_path)
    rec = manifest["files"]["blobs/0000.bin"]
    rec["sha256"] = rec.pop("blake3")                 # version 3 must say blake3
    resign(tmp_path, manifest)
    refused(tmp_path, r"checkpoint: manifest\.json: corrupted \(bad entry for 'blobs/0000\.bin'\)")
    manifest["format_version"] = 2                    # and version 2 sha256
    rec["blake3"] = rec.pop("sha256")
    resign(tmp_path, manifest)
    refused(tmp_path, r"checkpoint: manifest\.json: corrupted \(bad entry for 'blobs/0000\.bin'\)")


@pytest.mark.parametrize("version,chunk", [(1, 4 * MIB), (2, None), (2, 3 * MIB), (2, 1024),
                                           (2, True), (3, None), (3, 3 * MIB), (3, 1024)])
def test_a_chunk_field_that_does_not_fit_the_version_is_refused(tmp_path, version, chunk):
    write(tmp_path, {"a": np.arange(1000)})
    manifest = manifest_of(tmp_path)
    manifest["format_version"] = version
    rec = manifest["files"]["blobs/0000.bin"]
    if version < 3:                                   # the digest's name fits the version
        rec["sha256"] = rec.pop("blake3")
    if chunk is None:
        del rec["chunk"]
    else:
        rec["chunk"] = chunk
    resign(tmp_path, manifest)
    refused(tmp_path, r"checkpoint: manifest\.json: corrupted \(bad entry for 'blobs/0000\.bin'\)")
