"""Direct reads of pack files (python/_portal/checkpoint/direct_read.py): O_DIRECT into the
aligned mapping where the chunk is not cached, buffered where it is or where
O_DIRECT is refused; the tail of a file whose size is not a multiple of 4096,
a chunk across a hole's boundary, a truncated file, a misaligned buffer and a
filesystem without O_DIRECT all read the right bytes; read_checkpoint reads a
cold checkpoint directly and a refused O_DIRECT buffered."""
import mmap
import os
import types

import numpy as np
import pytest

from _portal.checkpoint import direct_read
from _portal.checkpoint.format import CheckpointError
from _portal.checkpoint.read import read_checkpoint
from _portal.checkpoint.write import write_checkpoint
from _portal.run.codeindex import CodeRegistry

PAGE = 4096
MIB = 1 << 20


def make_file(path, data):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def evict(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def warm(path):
    with open(path, "rb") as f:
        while f.read(MIB):
            pass


def read_with(path, size, span=None, offset=0):
    """(bytes read, how) of [offset, offset + span) through a Reader."""
    fd = os.open(path, os.O_RDONLY)
    reader = direct_read.Reader(fd, size)
    want = min(span if span is not None else size, size - offset)
    mem = mmap.mmap(-1, direct_read.round_up(max(want, 1)))
    view = memoryview(mem)
    try:
        how = reader.read(view[:direct_read.round_up(want)], offset, _truncated)
        return bytes(view[:want]), how, reader
    finally:
        view.release()
        reader.close()
        os.close(fd)


def _truncated(at):
    raise EOFError(at)


def direct_supported(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        reader = direct_read.Reader(fd, os.fstat(fd).st_size)
        ok = reader.direct_fd is not None
        reader.close()
        return ok
    finally:
        os.close(fd)


def random_bytes(n, seed=1):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


@pytest.mark.parametrize("size", [1, PAGE - 1, PAGE, PAGE + 1, 3 * PAGE + 123, 4 * MIB + 7])
def test_tail_not_a_multiple_of_the_block_reads_exactly(tmp_path, size):
    path = str(tmp_path / "f.bin")
    data = random_bytes(size)
    make_file(path, data)
    evict(path)
    got, how, _ = read_with(path, size)
    assert got == data
    if direct_supported(path):
        assert how == "direct"


def test_a_chunk_in_the_middle_and_at_the_tail(tmp_path):
    size = 3 * MIB + 5
    path = str(tmp_path / "f.bin")
    data = random_bytes(size, 2)
    make_file(path, data)
    evict(path)
    assert read_with(path, size, MIB, MIB)[0] == data[MIB:2 * MIB]
    assert read_with(path, size, 2 * MIB, 2 * MIB)[0] == data[2 * MIB:]


def test_a_chunk_across_a_hole_boundary_reads_zeros_in_the_hole(tmp_path):
    size = 4 * MIB + 3000
    path = str(tmp_path / "f.bin")
    head, tail = random_bytes(6000, 3), random_bytes(3000, 4)
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)
        f.seek(4 * MIB)
        f.write(tail)
        f.flush()
        os.fsync(f.fileno())
    evict(path)
    got, _, _ = read_with(path, size)
    assert got == head + bytes(4 * MIB - 6000) + tail


def test_a_cached_chunk_is_read_buffered_an_evicted_one_directly(tmp_path):
    path = str(tmp_path / "f.bin")
    data = random_bytes(2 * MIB, 5)
    make_file(path, data)
    if not direct_supported(path):
        pytest.skip("this filesystem refuses O_DIRECT")
    fd = os.open(path, os.O_RDONLY)
    try:
        known = direct_read.cached_pages(fd, 0, len(data))
    finally:
        os.close(fd)
    if known is None:
        pytest.skip("no cachestat(2) here (Linux < 6.5)")
    warm(path)
    got, how, _ = read_with(path, len(data))
    assert (got, how) == (data, "buffered")
    evict(path)
    got, how, _ = read_with(path, len(data))
    assert (got, how) == (data, "direct")
    fd = os.open(path, os.O_RDONLY)
    try:   # the direct read left nothing in the page cache (no second copy)
        assert direct_read.cached_pages(fd, 0, len(data)) == 0
    finally:
        os.close(fd)


def test_a_truncated_file_is_reported_where_it_ends(tmp_path):
    path = str(tmp_path / "f.bin")
    make_file(path, random_bytes(PAGE + 100, 6))
    evict(path)
    fd = os.open(path, os.O_RDONLY)
    reader = direct_read.Reader(fd, 3 * PAGE)        # the file is shorter than recorded
    mem = mmap.mmap(-1, 3 * PAGE)
    view = memoryview(mem)
    try:
        with pytest.raises(EOFError) as caught:
            reader.read(view, 0, _truncated)
        assert caught.value.args[0] == PAGE + 100
    finally:
        view.release()
        reader.close()
        os.close(fd)


def test_a_misaligned_buffer_falls_back_to_buffered_reads(tmp_path):
    path = str(tmp_path / "f.bin")
    data = random_bytes(3 * PAGE, 7)
    make_file(path, data)
    evict(path)
    fd = os.open(path, os.O_RDONLY)
    reader = direct_read.Reader(fd, len(data))
    mem = mmap.mmap(-1, 5 * PAGE)
    view = memoryview(mem)
    try:
        how = reader.read(view[1:1 + len(data)], 0, _truncated)
        assert bytes(view[1:1 + len(data)]) == data
        assert how in ("direct", "buffered")
        assert reader.direct_fd is None or how == "buffered"
    finally:
        view.release()
        reader.close()
        os.close(fd)


def test_tmpfs_reads_right_with_or_without_o_direct():
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    fd, path = __import__("tempfile").mkstemp(dir="/dev/shm")
    os.close(fd)
    try:
        data = random_bytes(PAGE * 5 + 17, 8)
        with open(path, "wb") as f:
            f.write(data)
        got, how, _ = read_with(path, len(data))
        assert got == data and how in ("direct", "buffered")
    finally:
        os.unlink(path)


# --- through read_checkpoint --------------------------------------------------

def write(parent, state):
    return write_checkpoint(parent, "job", state, None, {}, registry=CodeRegistry(), modules={})


def read(parent):
    return read_checkpoint(os.path.join(parent, "job"), None,
                           main_module=types.ModuleType("m"), check_sources=False)


def packs(parent):
    blobs = os.path.join(os.path.realpath(os.path.join(parent, "job")), "blobs")
    return [os.path.join(blobs, n) for n in sorted(os.listdir(blobs))]


def state_of():
    rng = np.random.default_rng(9)
    a = rng.integers(0, 1 << 30, (9 * MIB + 1000) // 8, dtype=np.int64)   # tail unaligned
    b = np.zeros(3 * MIB, np.uint8)
    b[2 * MIB + 5] = 7                                  # a chunk mostly in a hole
    return {"a": a, "b": b, "c": rng.random(1001)}


def check_same(state, back):
    for key in state:
        assert np.array_equal(state[key], back[key])


def count_reads(monkeypatch):
    hows = []
    real = direct_read.Reader.read

    def counted(self, *args):
        how = real(self, *args)
        hows.append(how)
        return how
    monkeypatch.setattr(direct_read.Reader, "read", counted)
    return hows


def test_a_cold_checkpoint_is_read_directly_and_verified(tmp_path, monkeypatch):
    state = state_of()
    write(str(tmp_path), state)
    for p in packs(str(tmp_path)):
        evict(p)
    hows = count_reads(monkeypatch)
    _, back = read(str(tmp_path))
    check_same(state, back)
    if direct_supported(packs(str(tmp_path))[0]):
        assert hows and set(hows) == {"direct"}


def test_a_corrupted_byte_read_directly_is_refused(tmp_path):
    state = state_of()
    write(str(tmp_path), state)
    p = packs(str(tmp_path))[0]
    with open(p, "r+b") as f:
        f.seek(5 * MIB + 3)
        byte = f.read(1)
        f.seek(5 * MIB + 3)
        f.write(bytes([byte[0] ^ 1]))
        f.flush()
        os.fsync(f.fileno())
    evict(p)
    with pytest.raises(CheckpointError, match="corrupted"):
        read(str(tmp_path))


def test_without_o_direct_the_checkpoint_is_read_buffered(tmp_path, monkeypatch):
    state = state_of()
    write(str(tmp_path), state)
    for p in packs(str(tmp_path)):
        evict(p)
    monkeypatch.setattr(direct_read, "_O_DIRECT", 0)
    hows = count_reads(monkeypatch)
    _, back = read(str(tmp_path))
    check_same(state, back)
    assert hows == []          # no Reader: the buffered path with its read-ahead


def test_a_checkpoint_truncated_on_disk_is_refused_by_name(tmp_path):
    state = state_of()
    write(str(tmp_path), state)
    p = packs(str(tmp_path))[0]
    size = os.path.getsize(p)
    with open(p, "r+b") as f:
        f.truncate(size - 10)
    evict(p)
    with pytest.raises(CheckpointError, match="truncated|size"):
        read(str(tmp_path))
