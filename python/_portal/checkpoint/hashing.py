"""Digests of a checkpoint's files: the chunk hash of each format version, the
digests of all-zero chunks known in advance, the zero pages a writer leaves as
holes and the extents a reader reads."""
import errno
import hashlib
import os
from typing import NamedTuple

from _portal.checkpoint.format import (CHUNK_BYTES, FORMAT_VERSION, IO_CHUNK, PORTAL_VERSION,
                                       chunk_ok, fail)

# pack files: chunk digests and holes (format versions 2 and 3)
#
# A pack file's digest is SHA-256 over the concatenated SHA-256 digests of its
# CHUNK_BYTES chunks (the last one shorter): the chunks are hashed on several
# threads, and a chunk that is all zero has a digest known in advance, so that
# neither the writer nor the reader hashes (or reads) zeros.  The writer skips
# every all-zero 4 KiB page (untouched pages of np.zeros read as zeros too): the
# file has holes there (lseek past them, ftruncate to the full size at the end).

try:
    from _portal import _blake3        # src/native/blake3_hash.c
except ImportError:              # not built: write version 2, refuse 3 by name
    _blake3 = None
PAGE = 4096                   # zero pages of this size become holes
ZERO_CHUNK = memoryview(bytes(CHUNK_BYTES))
_zero_digests = {}


class ChunkHash(NamedTuple):
    """The hash of a pack file's chunks in one format version."""
    name: str            # the manifest record's field that holds the digest
    new: object          # () -> a hasher with update(buffer) and digest()


SHA256 = ChunkHash("sha256", hashlib.sha256)
BLAKE3 = ChunkHash("blake3", _blake3.Hasher if _blake3 is not None else None)
WRITE_VERSION = FORMAT_VERSION if _blake3 is not None else 2
WRITE_HASH = BLAKE3 if WRITE_VERSION >= 3 else SHA256


def chunk_hash(version):
    """The chunk hash of pack files of format ``version`` (2 or 3)."""
    if version < 3:
        return SHA256
    if BLAKE3.new is None:
        fail(f"checkpoint format version {version} (pack files hashed with blake3) needs "
              f"portal's native module _portal._blake3, which this build of portal "
              f"{PORTAL_VERSION} lacks")
    return BLAKE3


def record_digest(record):
    """(hash name, recorded hex digest) of a manifest file record."""
    name = BLAKE3.name if BLAKE3.name in record else SHA256.name
    return name, record.get(name)


def zero_digest(n, hash=SHA256):
    """The digest (bytes) of ``n`` zero bytes under ``hash``, n <= CHUNK_BYTES or any."""
    d = _zero_digests.get((hash.name, n))
    if d is None:
        h = hash.new()
        for start in range(0, n, CHUNK_BYTES):
            h.update(ZERO_CHUNK[:min(CHUNK_BYTES, n - start)])
        d = _zero_digests[hash.name, n] = h.digest()
    return d


def chunks_digest(digests, hash=SHA256):
    """A pack file's digest (hex) from its chunks' digests, in order."""
    h = hash.new()
    h.update(b"".join(digests))
    return h.digest().hex()


def _numpy():
    try:
        import numpy
        return numpy
    except ImportError:
        return None


def data_runs(piece):
    """[(start, end)] of ``piece`` (a byte memoryview beginning on a page of the
    file) that are not all-zero pages; the whole piece without numpy."""
    n = piece.nbytes
    np = _numpy()
    if np is None or n == 0:
        return [(0, n)] if n else []
    arr = np.frombuffer(piece, dtype=np.uint8)
    full = n // PAGE
    pages = -(-n // PAGE)
    flags = np.zeros(pages + 2, dtype=np.int8)    # a False page before and after
    if full:
        words = arr[:full * PAGE].view(np.uint64).reshape(full, PAGE // 8)
        nonzero = words[:, 0] != 0                # dense data: decided by one word
        maybe = np.flatnonzero(~nonzero)
        for start in range(0, maybe.size, 256):   # the others in full, 1 MiB at a time
            part = maybe[start:start + 256]
            nonzero[part] = words[part].any(axis=1)
        flags[1:full + 1] = nonzero
    if n > full * PAGE:
        flags[full + 1] = bool(arr[full * PAGE:].any())
    steps = np.diff(flags)
    starts = np.flatnonzero(steps == 1)
    ends = np.flatnonzero(steps == -1)
    return [(int(a) * PAGE, min(int(b) * PAGE, n)) for a, b in zip(starts, ends)]


def data_extents(fd, size):
    """[(start, end)] of the file that hold data (SEEK_DATA / SEEK_HOLE); the
    whole file where the filesystem cannot tell."""
    extents, pos = [], 0
    try:
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:      # no data after pos
                    break
                raise
            end = os.lseek(fd, start, os.SEEK_HOLE)
            extents.append((start, min(end, size)))
            pos = end
    except (OSError, AttributeError):
        return [(0, size)]
    return extents


def digest_file(fd, size, record):
    """The digest of a checkpoint file (descriptor ``fd``, ``size`` bytes) as its
    manifest ``record`` defines it (hex): sha256 of the whole file, or, with
    "chunk", of its chunks' digests, holes not read.  For portal inspect."""
    chunk = record.get("chunk") if isinstance(record, dict) else None
    hash = BLAKE3 if isinstance(record, dict) and BLAKE3.name in record else SHA256
    if hash.new is None:
        return None                           # blake3 not built: cannot tell
    if not isinstance(chunk, int) or not chunk_ok(chunk):
        h = hashlib.sha256()
        pos = 0
        while True:
            data = os.pread(fd, IO_CHUNK, pos)
            if not data:
                return h.hexdigest()
            h.update(data)
            pos += len(data)
    extents = data_extents(fd, size)
    digests = []
    for start in range(0, size, chunk):
        end = min(start + chunk, size)
        if not any(a < end and b > start for a, b in extents):
            digests.append(zero_digest(end - start, hash))
            continue
        h = hash.new()
        pos = start
        while pos < end:
            data = os.pread(fd, min(IO_CHUNK, end - pos), pos)
            if not data:
                break
            h.update(data)
            pos += len(data)
        digests.append(h.digest())
    return chunks_digest(digests, hash)
