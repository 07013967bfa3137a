"""The BLAKE3 module behind format version 3's chunk digests (src/native/blake3_hash.c,
the reference C implementation in third_party/blake3): it must give BLAKE3's
published test vectors (github.com/BLAKE3-team/BLAKE3, test_vectors/test_vectors.json:
input i % 251 for i < input_len, the first 32 bytes of "hash") at every length
that takes another code path (one block, one chunk, several chunks, the SIMD
widths), whole, in pieces and from a memoryview of an mmap, on several threads."""
import mmap
import threading

import pytest

from _portal import _blake3
from _portal.checkpoint import format as ckformat, hashing as ckhash

VECTORS = {
    0: "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262",
    1: "2d3adedff11b61f14c886e35afa036736dcd87a74d27b5c1510225d0f592e213",
    1023: "10108970eeda3eb932baac1428c7a2163b0e924c9a9e25b35bba72b28f70bd11",
    1024: "42214739f095a406f3fc83deb889744ac00df831c10daa55189b5d121c855af7",
    1025: "d00278ae47eb27b34faecf67b4fe263f82d5412916c1ffd97c8cb7fb814b8444",
    2048: "e776b6028c7cd22a4d0ba182a8bf62205d2ef576467e838ed6f2529b85fba24a",
    4096: "015094013f57a5277b59d8475c0501042c0b642e531b0a1c8f58d2163229e969",
    8193: "bab6c09cb8ce8cf459261398d2e7aef35700bf488116ceb94a36d0f5f1b7bc3b",
    16384: "f875d6646de28985646f34ee13be9a576fd515f76b5b0a26bb324735041ddde4",
    31744: "62b6960e1a44bcc1eb1a611a8d6235b6b4b78f32e7abc4fb4c6cdcce94895c47",
    102400: "bc3e3d41a1146b069abffad3c0d44860cf664390afce4d9661f7902e7943e085",
}


def vector_input(n):
    return bytes(i % 251 for i in range(n))


@pytest.mark.parametrize("n", sorted(VECTORS))
def test_published_vectors(n):
    data = vector_input(n)
    assert _blake3.digest(data).hex() == VECTORS[n]
    h = _blake3.Hasher()                       # in uneven pieces
    for start in range(0, n, 3001):
        h.update(memoryview(data)[start:start + 3001])
    assert h.digest().hex() == VECTORS[n]
    assert h.digest().hex() == VECTORS[n]      # digest() does not finish the hasher


def test_from_a_memoryview_of_an_mmap_on_threads():
    n = 102400
    m = mmap.mmap(-1, n)
    m[:] = vector_input(n)
    view = memoryview(m)
    results = []
    threads = [threading.Thread(target=lambda: results.append(_blake3.digest(view).hex()))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [VECTORS[n]] * 4
    view.release()
    m.close()


def test_refuses_what_is_not_a_contiguous_buffer():
    with pytest.raises(TypeError):
        _blake3.digest("text")
    with pytest.raises(TypeError):
        _blake3.Hasher(b"x")
    with pytest.raises(BufferError):
        _blake3.digest(memoryview(bytes(64))[::2])


def test_the_writer_uses_it():
    assert _blake3.DIGEST_BYTES == 32 and _blake3.IMPLEMENTATION.startswith("blake3 ")
    assert ckhash.WRITE_VERSION == ckformat.FORMAT_VERSION == 3
    assert ckhash.WRITE_HASH is ckhash.BLAKE3
    assert ckformat.SUPPORTED_VERSIONS == (1, 2, 3)
