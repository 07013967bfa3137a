"""Portal checkpoints on disk: format version 3 (versions 1 and 2 are still read).

Grammar (the same text is in docs/checkpoint-format.md)::

    PARENT/NAME            -> NAME.<G>    symlink, replaced atomically by rename(2)
    PARENT/NAME.<G>/       one complete checkpoint (generation G = 1, 2, ...)
        manifest.json      UTF-8 JSON object, see below
        state.pickle       PRELUDE BODY: two pickle protocol-5 streams sharing one
                           memo (see _portal.checkpoint.reducers); out-of-band buffers are
                           numbered 0, 1, ... in stream order
        blobs/NNNN.bin     pack files holding the out-of-band buffers, each buffer
                           whole inside one file at a 4096-aligned offset, the gaps
                           zero; a new file starts when one would pass 256 MiB;
                           all-zero 4 KiB pages are holes (versions 2, 3)
    PARENT/.NAME.tmp-<pid>-<random>/   a checkpoint being written (never read)

    manifest = {
      "format_version": 3,                 always the FIRST key (2: a build
                                           without _portal._blake3)
      "format": "portal-checkpoint",
      "portal_version": "0.1.0",
      "python": {"version": "3.11.2", "implementation": "cpython",
                 "magic": "a70d0d0a"},     bytecode magic: marshalled code and
                                           resume offsets need the same one
      "created": "2024-05-01T12:00:00.000Z",   UTC
      ...caller fields: "script", "argv", "error" {type, message, traceback, file,
         line}, "loop" {file, line, iteration}, "sources" {filename: sha256}
         (default: every file of the code registry), ...
      "files": {"state.pickle": {"size": N, "sha256": HEX},
                "blobs/0000.bin": {"size": N, "chunk": C, "blake3": HEX}, ...},
                                           every file of the checkpoint but the
                                           manifest itself; sha256: of the whole
                                           file (state.pickle; every file of
                                           version 1, which has no "chunk"); a
                                           pack file of version 3 (2), with
                                           "chunk" C, a power of two in [4096,
                                           256 MiB]: "blake3" ("sha256"), H over
                                           the concatenated H digests of its
                                           C-byte chunks (the last one shorter),
                                           H = BLAKE3 (SHA-256), 32 bytes
      "buffers": [[FILE, OFFSET, SIZE], ...]   out-of-band buffer i is bytes
                                           [OFFSET, OFFSET+SIZE) of FILE
      "total_bytes": N,                    all files, the manifest included
      "hmac": HEX                          always LAST: HMAC-SHA256 with the user's
                                           key (signing.py) of the domain string
                                           "portal-checkpoint-manifest\n" + every
                                           byte of the file before ',\n "hmac": "'
    }

Readers ignore fields they do not know; a new optional field does not change the
version.  Before it unpickles anything a reader refuses: a directory or file that
is not the user's or is writable by group or others, a symbolic link inside, a
manifest without a valid HMAC, another format name or version (by name), and any
file whose size or sha256 differs from the manifest's.  Directories are created
0700 and files 0600, whatever the umask.

Commit protocol (``write_checkpoint``): everything is written into
``PARENT/.NAME.tmp-...``, every file and both directories are fsynced, the
directory is renamed to ``NAME.<G+1>``, the parent fsynced, a new symlink made
beside and renamed over ``NAME`` (the commit point), the parent fsynced again, and
only then the previous generation removed.  A crash at any moment leaves ``NAME``
naming either the previous complete checkpoint or the new complete one; leftovers
(temporary directories of dead writers, unreferenced generations) are removed by
the next write.  One writer per NAME at a time.
"""
import datetime
import collections
import errno
import hashlib
import importlib.util
import io
import json
import mmap
import os
import platform
import re
import shutil
import stat
import sys
import tempfile
import threading
from _queue import SimpleQueue
from concurrent.futures import Future
from typing import NamedTuple

from _portal.job_contract import MANIFEST_MAX_BYTES  # contract/job_record.json, generated
from _portal.checkpoint import reducers as _reducers
from _portal.checkpoint import progress as _progress
from _portal.checkpoint import direct_read
from _portal.store import signing, trust as store
from _portal.store.trust import shown
from _portal.run.codeindex import REGISTRY, CodeChanged, sha256_hex

__all__ = ["write_checkpoint", "read_checkpoint", "CheckpointInfo", "CheckpointError",
           "SourceChanged", "FORMAT_NAME", "FORMAT_VERSION", "PORTAL_VERSION"]

FORMAT_NAME = "portal-checkpoint"
FORMAT_VERSION = 3               # written (version 2 by a build without _blake3)
SUPPORTED_VERSIONS = (1, 2, 3)   # 1: pack files hashed whole, no holes; 2: their
                                 # chunks by sha256; 3: their chunks by BLAKE3
try:
    from _portal import _blake3        # src/native/blake3_hash.c
except ImportError:              # not built: write version 2, refuse 3 by name
    _blake3 = None
try:
    from _portal import __version__ as PORTAL_VERSION   # noqa: N812
except ImportError:
    PORTAL_VERSION = "0.1.0"

MANIFEST = "manifest.json"
STATE = "state.pickle"
BLOBS = "blobs"
ALIGN = 4096
PACK_BYTES = 256 << 20        # start a new pack file past this size
IO_CHUNK = 64 << 20           # bytes per write(2) / hash update
READ_AHEAD = 32 << 20         # a reader asks the kernel to fetch this far past its chunk
RESERVED = ("format_version", "format", "portal_version", "python", "created", "files",
            "buffers", "total_bytes", "hmac")
PYTHON_MAGIC = importlib.util.MAGIC_NUMBER.hex()

_write = os.write             # tests replace them to simulate a full disk
_pwrite = os.pwrite


class CheckpointError(store.PortalError):
    """A checkpoint cannot be read or committed; the message says why, in lower case."""


class SourceChanged(CheckpointError, CodeChanged):
    """A source file of the saved program is missing or differs from the saved one."""

    def __init__(self, filename, reason=None):
        CodeChanged.__init__(self, filename, reason)

    def __str__(self):
        return "checkpoint: " + CodeChanged.__str__(self)


class CheckpointInfo(NamedTuple):
    path: str            # PARENT/NAME (the symlink)
    total_bytes: int     # all files of the checkpoint, manifest included
    manifest: dict
    seconds: float = 0.0  # the whole write (pickle, pack files, fsyncs, commit)


# ---------------------------------------------------------------------------
# writing

class _HashingWriter:
    """The pickler's output: hashes as it writes; remembers its own OSError so that
    the pickler can tell a full disk from an object that cannot be saved."""

    def __init__(self, fd):
        self.fd = fd
        self.hash = hashlib.sha256()
        self.size = 0
        self.error = None

    def write(self, data):
        view = memoryview(data).cast("B")
        self.hash.update(view)
        try:
            _write_all(self.fd, view)
        except OSError as exc:
            self.error = exc
            raise
        self.size += view.nbytes
        return view.nbytes


def _write_all(fd, view):
    pos, n = 0, view.nbytes
    while pos < n:
        pos += _write(fd, view[pos:pos + IO_CHUNK])


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _create(path):
    """A new file, 0600 whatever the umask: a checkpoint is code (docs/security.md)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.fchmod(fd, 0o600)
    return fd


def _mkdir_private(path):
    os.mkdir(path, 0o700)
    os.chmod(path, 0o700)


def _layout(views):
    """Pack files for the buffers: [(name, size, [(offset, view), ...])], table."""
    files, table = [], []
    current = None
    for view in views:
        n = view.nbytes
        if current is not None:
            offset = -(-current[1] // ALIGN) * ALIGN
        if current is None or (current[1] > 0 and offset + n > PACK_BYTES):
            current = [f"{BLOBS}/{len(files):04d}.bin", 0, []]
            files.append(current)
            offset = 0
        current[2].append((offset, view))
        current[1] = offset + n
        table.append([current[0], offset, n])
    return files, table


# ---------------------------------------------------------------------------
# pack files: chunk digests and holes (format version 2)
#
# A pack file's digest is SHA-256 over the concatenated SHA-256 digests of its
# CHUNK_BYTES chunks (the last one shorter): the chunks are hashed on several
# threads, and a chunk that is all zero has a digest known in advance, so that
# neither the writer nor the reader hashes (or reads) zeros.  The writer skips
# every all-zero 4 KiB page (untouched pages of np.zeros read as zeros too): the
# file has holes there (lseek past them, ftruncate to the full size at the end).

CHUNK_BYTES = 4 << 20         # digest chunk of a pack file (versions 2 and 3)
MIN_CHUNK_BYTES = ALIGN       # a manifest's "chunk": a power of two in this range
MAX_CHUNK_BYTES = PACK_BYTES
PAGE = 4096                   # zero pages of this size become holes
_ZERO_CHUNK = memoryview(bytes(CHUNK_BYTES))
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
        _fail(f"checkpoint format version {version} (pack files hashed with blake3) needs "
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
            h.update(_ZERO_CHUNK[:min(CHUNK_BYTES, n - start)])
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


def _data_runs(piece):
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


def _chunks(items, size, chunk=CHUNK_BYTES):
    """A pack file laid out as ``items`` [(offset, view)] (gaps zero), cut into
    chunks: [(start, end, [(offset, piece), ...])], the pieces being the
    buffers' bytes inside [start, end)."""
    out = [(start, min(start + chunk, size), []) for start in range(0, size, chunk)]
    for offset, view in items:
        pos, end = offset, offset + view.nbytes
        while pos < end:
            index = pos // chunk
            stop = min(end, (index + 1) * chunk)
            out[index][2].append((pos, view[pos - offset:stop - offset]))
            pos = stop
    return out


def _pwrite_all(fd, view, offset):
    pos, n = 0, view.nbytes
    while pos < n:
        pos += _pwrite(fd, view[pos:pos + IO_CHUNK], offset + pos)


def _write_chunk(fd, start, end, pieces):
    """Write a chunk's data pages (all-zero pages left as holes); its digest."""
    runs = [(offset, piece, _data_runs(piece)) for offset, piece in pieces]
    if not any(r for _, _, r in runs):
        return zero_digest(end - start, WRITE_HASH)
    h = WRITE_HASH.new()
    pos = start
    for offset, piece, data in runs:
        if offset > pos:
            h.update(_ZERO_CHUNK[:offset - pos])
        for a, b in data:
            _pwrite_all(fd, piece[a:b], offset + a)
        h.update(piece)
        pos = offset + piece.nbytes
    if end > pos:
        h.update(_ZERO_CHUNK[:end - pos])
    return h.digest()


class _WriteBehind:
    """Keep a pack file's dirty page cache to about two windows while writing it.

    Each full window (FLUSH_BYTES) is handed to writeback at once
    (sync_file_range WRITE); the window before it is waited for and its pages
    dropped (fadvise DONTNEED).  A checkpoint is written when memory is short:
    without this, GiBs of dirty page cache pile up until the final fsync, and
    the writer competes with the program for new pages (on this project's VM,
    first use of memory is slow: 2 GiB took 16 s from a tensor vs 1 s again).
    Purely advisory: durability still comes from the fsync of every file after
    this, and where sync_file_range is missing or fails nothing is done."""

    def __init__(self, fd):
        self.fd, self.pos, self.start, self.prev = fd, 0, 0, None

    def wrote(self, n):
        self.pos += n
        if self.pos - self.start >= FLUSH_BYTES:
            self._window(self.start, self.pos)
            self.start = self.pos

    def finish(self):
        if self.prev is not None:
            self._drop(*self.prev)

    def _window(self, start, end):
        sync = _sync_file_range()
        if sync is None:
            return
        sync(self.fd, start, end - start, _SFR_WRITE)
        if self.prev is not None:
            self._drop(*self.prev)
        self.prev = (start, end)

    def _drop(self, start, end):
        sync = _sync_file_range()
        if sync(self.fd, start, end - start, _SFR_WAIT_BEFORE | _SFR_WRITE | _SFR_WAIT_AFTER) == 0:
            try:
                os.posix_fadvise(self.fd, start, end - start, os.POSIX_FADV_DONTNEED)
            except OSError:
                pass


FLUSH_BYTES = 64 << 20
_SFR_WAIT_BEFORE, _SFR_WRITE, _SFR_WAIT_AFTER = 1, 2, 4      # <linux/fs.h>
_SYNC_FILE_RANGE = []


def _sync_file_range():
    """libc's sync_file_range(2) through ctypes (which releases the GIL), or None."""
    if not _SYNC_FILE_RANGE:
        fn = None
        try:
            import ctypes
            fn = ctypes.CDLL(None, use_errno=True).sync_file_range
            fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
            fn.restype = ctypes.c_int
        except (ImportError, OSError, AttributeError):
            fn = None
        _SYNC_FILE_RANGE.append(fn)
    return _SYNC_FILE_RANGE[0]


def _workers():
    """Threads that write or read and hash chunks: sha256, zero scans, pread and
    pwrite all release the GIL; at least two, so that I/O and hashing overlap."""
    return max(2, min(IO_THREADS, 2 * (os.cpu_count() or 1)))


IO_THREADS = 8                # at most this many I/O and hashing threads
#: Their C stack: hashing, zero scans and pread/pwrite need little of it.  A
#: thread's stack is address space that the memory tripwire's cap counts
#: (RLIMIT_DATA), and the writer runs when that is what ran short.
IO_THREAD_STACK_BYTES = 256 << 10


class _Pool:
    """Worker threads for ``submit(fn, *args)`` (a ``concurrent.futures.Future``
    each), started as work comes, up to ``size``.  A checkpoint is written when
    memory ran short, where a thread may not start (its stack and its malloc
    arena are address space the tripwire's cap refuses): the threads already
    started do the work, and with none the calling thread does it as it is
    submitted.  Nothing is started before the first write or read."""

    def __init__(self, size, name):
        self._size, self._name = size, name
        self._threads = []
        self._queue = None
        self._refused = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()

    def submit(self, fn, *args):
        if not self._refused and len(self._threads) < self._size:
            self._start()
        future = Future()
        if self._threads:
            self._queue.put((future, fn, args))
        else:
            _run_into(future, fn, args)
        return future

    def _start(self):
        if self._queue is None:
            self._queue = SimpleQueue()
        thread = threading.Thread(target=self._work, name=f"{self._name}_{len(self._threads)}", daemon=True)
        try:
            old = threading.stack_size(IO_THREAD_STACK_BYTES)
        except (ValueError, RuntimeError):
            old = None
        try:
            thread.start()
        except RuntimeError:          # "can't start new thread": no room for it
            self._refused = True
            return
        finally:
            if old is not None:
                threading.stack_size(old)
        self._threads.append(thread)

    def _work(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args = item
            _run_into(future, fn, args)
            del item, future, fn, args

    def shutdown(self):
        """Wait for every thread to finish the work given (cancelled work is skipped)."""
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join()
        self._threads = []


def _run_into(future, fn, args):
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn(*args)
    except BaseException as exc:      # handed to the one who waits for it
        future.set_exception(exc)
    else:
        future.set_result(result)


def _write_blobs(directory, views, progress=None):
    """Write the pack files, chunk by chunk on worker threads (each: find the zero
    pages, pwrite the others, hash), in file order, at most a few chunks per
    thread ahead; returns ({name: record}, buffer table)."""
    files, table = _layout(views)
    if not files:
        return {}, table
    _mkdir_private(os.path.join(directory, BLOBS))
    fds = []
    try:
        with _Pool(_workers(), "portal-write") as pool:
            records = _write_packs(pool, directory, files, fds, progress)
    finally:
        for fd in fds:              # only once no worker can still write to them
            os.close(fd)
    _fsync_dir(os.path.join(directory, BLOBS))
    return records, table


def _write_packs(pool, directory, files, fds, progress):
    records = {}
    pending = collections.deque()
    ahead = 2 * _workers()           # chunks in flight at most
    try:
        for name, size, items in files:
            fd = _create(os.path.join(directory, name))
            fds.append(fd)
            behind = _WriteBehind(fd)
            digests = []
            for start, end, pieces in _chunks(items, size):
                pending.append((end - start, pool.submit(_write_chunk, fd, start, end, pieces)))
                while len(pending) > ahead:
                    _collect(pending, digests, behind, progress)
            while pending:
                _collect(pending, digests, behind, progress)
            os.ftruncate(fd, size)            # trailing zero pages: a hole too
            behind.finish()
            records[name] = {"size": size, "chunk": CHUNK_BYTES,
                             WRITE_HASH.name: chunks_digest(digests, WRITE_HASH)}
        for fd in fds:
            os.fsync(fd)
    except BaseException:
        for _, future in pending:
            future.cancel()
        raise
    return records


def _collect(pending, digests, behind, progress):
    n, future = pending.popleft()
    digests.append(future.result())
    behind.wrote(n)
    if progress is not None:
        progress.advance(n)


def _generations(parent, name):
    pattern = re.compile(re.escape(name) + r"\.(\d+)")
    found = {}
    for entry in os.listdir(parent):
        m = pattern.fullmatch(entry)
        if m:
            found[int(m.group(1))] = entry
    return found


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale(parent, name):
    """Temporary directories and link files left by writers that died."""
    prefix = f".{name}.tmp-"
    link_prefix = f".{name}.link-"
    for entry in os.listdir(parent):
        for pre in (prefix, link_prefix):
            if entry.startswith(pre):
                pid = entry[len(pre):].split("-", 1)[0]
                if pid.isdigit() and _pid_alive(int(pid)) and int(pid) != os.getpid():
                    continue
                path = os.path.join(parent, entry)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    try:
                        os.unlink(path)
                    except OSError:
                        pass


def _check_name(name):
    if not name or "/" in name or name.startswith(".") or name in (".", "..") or \
            re.fullmatch(r".*\.\d+", name) or "\0" in name:
        raise ValueError(f"bad checkpoint name {name!r}")


def write_checkpoint(parent_dir, name, state, roots_for_errors=None, manifest_fields=None,
                     *, registry=None, modules=None, user_module_names=(), reducers=None,
                     subclass_reducers=None, key=None):
    """Write ``state`` as checkpoint ``parent_dir/name`` and commit it atomically.

    roots_for_errors  {description: object} for the message of ``Unsaveable``
    manifest_fields   caller fields of the manifest (script, argv, error, loop,
                      sources ...); the reserved keys are refused; "sources"
                      defaults to every file of the code registry
    registry, modules, user_module_names, reducers, subclass_reducers
                      passed to reducers.Pickler
    key               the key that signs the manifest (default: the user's,
                      signing.load_or_create_key(); a bad key is refused with
                      ``signing.SigningKeyError`` before anything is written)

    Returns ``CheckpointInfo(path, total_bytes, manifest)``.  On any failure
    (``reducers.Unsaveable``, ``OSError`` such as ENOSPC, ``MemoryError`` ...) the
    temporary directory is removed, the previous checkpoint is untouched, and the
    exception propagates.
    """
    _check_name(name)
    fields = dict(manifest_fields or {})
    clash = [k for k in fields if k in RESERVED]
    if clash:
        raise ValueError(f"manifest fields {clash} are reserved")
    if "sources" not in fields:
        fields["sources"] = (registry or REGISTRY).sources()
    parent = os.path.abspath(parent_dir)
    key = signing.load_or_create_key() if key is None else key
    try:
        store.make_private_dir(parent)    # made 0700, or the existing one checked: ours, private
    except store.StoreError as exc:
        raise CheckpointError(f"checkpoint: {exc}") from None
    link = os.path.join(parent, name)
    if os.path.exists(link) and not os.path.islink(link):
        raise CheckpointError(f"checkpoint: {link}: exists and is not a checkpoint link")
    _remove_stale(parent, name)
    shown_progress = None
    tmp = tempfile.mkdtemp(prefix=f".{name}.tmp-{os.getpid()}-", dir=parent)
    os.chmod(tmp, 0o700)          # mkdtemp's 0700 is masked by the umask
    try:
        files = {}
        buffers = []
        fd = _create(os.path.join(tmp, STATE))
        try:
            out = _HashingWriter(fd)
            pickler = _reducers.Pickler(out, registry=registry, modules=modules,
                                       user_module_names=user_module_names,
                                       buffer_callback=buffers.append, reducers=reducers,
                                       subclass_reducers=subclass_reducers)
            pickler.dump_state(state, roots_for_errors)
            del pickler
            os.fsync(fd)
        finally:
            os.close(fd)
        files[STATE] = {"size": out.size, "sha256": out.hash.hexdigest()}
        views = [pb.raw() for pb in buffers]
        shown_progress = _progress.Progress("writing checkpoint", "checkpoint written",
                                            sum(v.nbytes for v in views))
        blob_files, table = _write_blobs(tmp, views, shown_progress)
        del views, buffers
        files.update(blob_files)
        manifest = {
            "format_version": WRITE_VERSION,
            "format": FORMAT_NAME,
            "portal_version": PORTAL_VERSION,
            "python": {"version": platform.python_version(),
                       "implementation": sys.implementation.name,
                       "magic": PYTHON_MAGIC},
            "created": datetime.datetime.now(datetime.timezone.utc)
                               .isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        }
        manifest.update(fields)
        manifest["files"] = files
        manifest["buffers"] = table
        data_bytes = sum(f["size"] for f in files.values())
        manifest["total_bytes"] = 0
        text = _manifest_text(manifest, data_bytes, key)
        manifest = json.loads(text)
        fd = _create(os.path.join(tmp, MANIFEST))
        try:
            _write_all(fd, memoryview(text.encode("utf-8")))
            os.fsync(fd)
        finally:
            os.close(fd)
        _fsync_dir(tmp)
        gens = _generations(parent, name)
        gen = max(gens, default=0) + 1
        final = os.path.join(parent, f"{name}.{gen}")
        os.rename(tmp, final)
    except BaseException:
        if shown_progress is not None:
            shown_progress.abandon()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    committed = False
    link_tmp = os.path.join(parent, f".{name}.link-{os.getpid()}")
    try:
        _fsync_dir(parent)
        try:
            os.unlink(link_tmp)
        except FileNotFoundError:
            pass
        os.symlink(f"{name}.{gen}", link_tmp)
        os.rename(link_tmp, link)          # the commit point
        committed = True
        _fsync_dir(parent)
    except BaseException:
        shown_progress.abandon()
        if not committed:
            shutil.rmtree(final, ignore_errors=True)
            try:
                os.unlink(link_tmp)
            except OSError:
                pass
        raise
    seconds = shown_progress.finish()
    for g, entry in _generations(parent, name).items():
        if g != gen:
            shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)
    return CheckpointInfo(link, manifest["total_bytes"], manifest, seconds)


def _signed_part(manifest):
    """The signed bytes of the manifest's text: its JSON (indent 1) up to, not
    including, the closing "\\n}" (docs/checkpoint-format.md, "Signature")."""
    body = json.dumps(manifest, indent=1, ensure_ascii=False)
    assert body.endswith("\n}")
    return body[:-2]


def _signature_tail(mac):
    return f',\n "hmac": "{mac}"\n}}\n'


# What a signed manifest ends with; the HMAC covers every byte before it.
_TAIL = re.compile(rb',\n "hmac": "([0-9a-f]{64})"\n}\n\Z')


def _manifest_text(manifest, data_bytes, key):
    """The signed JSON text, whose "total_bytes" counts the manifest's own size too
    (the signature has a fixed length)."""
    total = data_bytes
    tail = len(_signature_tail("0" * 64))
    for _ in range(4):
        manifest["total_bytes"] = total
        signed = _signed_part(manifest)
        new_total = data_bytes + len(signed.encode("utf-8")) + tail
        if new_total == total:
            break
        total = new_total
    return signed + _signature_tail(signing.sign(key, signed.encode("utf-8")))


def signed_manifest_text(manifest, key):
    """The text of ``manifest`` (any "hmac" in it dropped) signed with ``key``, as
    the writer lays it out (total_bytes is left as it is)."""
    manifest = {k: v for k, v in manifest.items() if k != "hmac"}
    signed = _signed_part(manifest)
    return signed + _signature_tail(signing.sign(key, signed.encode("utf-8")))


# ---------------------------------------------------------------------------
# reading

def _fail(message):
    raise CheckpointError(message)


# What a reader accepts of a manifest before it believes anything in it.
MAX_MANIFEST_BYTES = MANIFEST_MAX_BYTES   # a manifest is KiBs (sources, argv, traceback)
MAX_MANIFEST_DEPTH = 32           # objects and arrays nested deeper: not a manifest
MAX_MANIFEST_INT_DIGITS = 20      # sizes and offsets fit in 64 bits
MAX_FILE_BYTES = 1 << 50          # a size or offset past this is damage
_FILE_NAME = re.compile(r"(?:state\.pickle|blobs/[0-9]{4,6}\.bin)")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


# Trust (docs/security.md): a checkpoint is code, so before anything of it is used,
# every directory and file of it must be the user's own and writable by nobody
# else, and the manifest's HMAC must have been made with the user's key.  The
# manifest lists every other file's size and sha256, so the HMAC covers them all.

def trust_problem(label, st):
    """Why a file or directory (``os.stat_result`` st) cannot be trusted, or None."""
    uid = signing.euid()
    if st.st_uid != uid:
        return (f"{label}: is owned by uid {st.st_uid}, not by you (uid {uid}); "
                f"it is not trusted")
    if st.st_mode & 0o022:
        who = {0o020: "your group", 0o002: "others", 0o022: "your group and others"}
        return (f"{label}: is writable by {who[st.st_mode & 0o022]} (mode "
                f"{stat.S_IMODE(st.st_mode):04o}); it is not trusted (if only you ever "
                f"had access: chmod go-w {label})")
    return None


def _check_trusted(label, st):
    problem = trust_problem(label, st)
    if problem:
        _fail(f"checkpoint: {problem}")


def _open_dir(path, label):
    """fstat of the directory ``path``, opened O_DIRECTORY|O_NOFOLLOW, trusted."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            _fail(f"checkpoint: {label}: is a symbolic link; it is not trusted")
        if exc.errno == errno.ENOTDIR:
            _fail(f"checkpoint: {label}: is not a directory")
        _fail(f"checkpoint: {label}: cannot be read ({str(exc.strerror or exc).lower()})")
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    _check_trusted(label, st)
    return st


def generation_name(name, target):
    """Whether the link ``name`` -> ``target`` names a generation beside it."""
    return re.fullmatch(re.escape(name) + r"\.[0-9]{1,9}", target) is not None


def locate(path):
    """The generation directory of the checkpoint ``path`` (its link, or a
    generation directory), once what leads to it is the user's own: the link and
    the directory holding it (whoever can write there can swap the link), and the
    generation directory.  The link must name a generation beside it
    (``NAME.<G>``), nothing else."""
    link = os.path.abspath(path)
    try:
        st = os.lstat(link)
    except FileNotFoundError:
        _fail(f"checkpoint: {shown(path)}: no such checkpoint")
    except OSError as exc:
        _fail(f"checkpoint: {shown(path)}: cannot be read ({str(exc.strerror or exc).lower()})")
    directory = link
    if stat.S_ISLNK(st.st_mode):
        parent = os.path.dirname(link)
        _open_dir(parent, parent)
        if st.st_uid != signing.euid():
            _fail(f"checkpoint: {link}: is owned by uid {st.st_uid}, not by you (uid "
                  f"{signing.euid()}); it is not trusted")
        target = os.readlink(link)
        if not generation_name(os.path.basename(link), target):
            _fail(f"checkpoint: {link}: points to {shown(target)!r}, not to a generation "
                  f"beside it; it is not trusted")
        directory = os.path.join(parent, target)
    try:
        _open_dir(directory, directory)
    except FileNotFoundError:
        _fail(f"checkpoint: {shown(path)}: no such checkpoint")
    return directory


def open_trusted(directory, rel, missing):
    """(fd, size) of the regular file ``rel`` of the checkpoint, once it is trusted:
    opened O_NOFOLLOW|O_NONBLOCK (a FIFO is never waited on), checked on the
    descriptor (store.open_checked)."""
    fd, st = _open_checked(directory, rel, missing, None)
    return fd, st.st_size


def _open_checked(directory, rel, missing, max_bytes):
    try:
        return store.open_checked(os.path.join(directory, rel), max_bytes, label=rel,
                                  trust=trust_problem, untrusted="it is not trusted")
    except FileNotFoundError:
        _fail(f"checkpoint: {rel}: {missing}")
    except store.StoreError as exc:
        _fail(f"checkpoint: {exc}")


def read_manifest_bytes(directory):
    """The raw bytes of the manifest of generation ``directory``, once trusted,
    at most MAX_MANIFEST_BYTES."""
    fd, _ = _open_checked(directory, MANIFEST, "missing (not a checkpoint, or an incomplete one)",
                          MAX_MANIFEST_BYTES)
    try:
        raw = store.read_all(fd, MAX_MANIFEST_BYTES)
    finally:
        os.close(fd)
    if len(raw) > MAX_MANIFEST_BYTES:
        _fail(f"checkpoint: {MANIFEST}: is larger than {MAX_MANIFEST_BYTES} bytes (not a manifest)")
    return raw


def read_untrusted_manifest_bytes(directory):
    """The manifest's bytes without the owner check (portal inspect shows an
    untrusted one, never believes it): still O_NOFOLLOW|O_NONBLOCK, a regular
    file, size-capped.  None when it cannot be read so."""
    try:
        fd = os.open(os.path.join(directory, MANIFEST),
                     os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_MANIFEST_BYTES:
            return None
        raw = store.read_all(fd, MAX_MANIFEST_BYTES)
    finally:
        os.close(fd)
    return raw if len(raw) <= MAX_MANIFEST_BYTES else None


def parse_manifest(raw):
    """The manifest's JSON object (not yet checked): bounded depth and integers,
    no duplicate keys, no NaN (store.parse_json)."""
    try:
        manifest = store.parse_json(raw, MAX_MANIFEST_DEPTH, MAX_MANIFEST_INT_DIGITS)
    except UnicodeDecodeError:
        _fail(f"checkpoint: {MANIFEST}: corrupted (not utf-8)")
    except json.JSONDecodeError as exc:
        _fail(f"checkpoint: {MANIFEST}: corrupted (not valid json at line {exc.lineno} "
              f"column {exc.colno})")
    except (ValueError, RecursionError) as exc:
        _fail(f"checkpoint: {MANIFEST}: corrupted ({shown(exc)})")
    if not isinstance(manifest, dict):
        _fail(f"checkpoint: {MANIFEST}: corrupted (not a json object)")
    return manifest


def signature_status(raw, key=None):
    """("valid" | "missing" | "malformed" | "no-key" | "wrong", message or None) of the
    manifest file's bytes ``raw`` against ``key`` (default: the user's key)."""
    m = _TAIL.search(raw)
    if m is None:
        if b'"hmac"' in raw:
            return "malformed", (f"checkpoint: {MANIFEST}: its signature (hmac) is malformed "
                                 f"or misplaced: the manifest was edited")
        return "missing", (f"checkpoint: {MANIFEST}: carries no signature (hmac): it was not "
                           f"made by you with this portal, or it was edited or cut short")
    if key is None:
        try:
            key = signing.load_key()
        except signing.SigningKeyError as exc:
            return "no-key", f"checkpoint: cannot be verified: {exc}"
        if key is None:
            return "no-key", (f"checkpoint: cannot be verified: you have no key "
                              f"({signing.key_path()} is missing), so it was not made by you")
    if not signing.verify(key, raw[:m.start()], m.group(1).decode("ascii")):
        return "wrong", (f"checkpoint: {MANIFEST}: its signature (hmac) is wrong: it was not "
                         f"made by you (another key), or it was edited since")
    return "valid", None


def check_signature(raw, key=None):
    """Refuse a manifest whose HMAC is missing or not made with ``key`` (default:
    the user's key).  ``raw`` is the manifest file's bytes."""
    status, message = signature_status(raw, key)
    if status != "valid":
        _fail(message)


def load_manifest_bytes(raw, key=None, job_id=None):
    """The manifest in the file bytes ``raw``: the signature first, over the raw
    bytes (``key``, default the user's); only then is the text parsed (with
    bounds), and everything in it validated (check_manifest), then, given
    ``job_id``, bound to that job.  Any problem is a CheckpointError, nothing else
    (the fuzz test, tests/unit/python/test_reader_fuzz.py, holds it to that)."""
    check_signature(raw, key)
    manifest = parse_manifest(raw)
    check_manifest(manifest)
    if job_id is not None:
        check_job(manifest, job_id)
    return manifest


def plain_file_name(rel):
    """Whether ``rel`` is a name a checkpoint's files have (no `/` but blobs/'s,
    no `..`, not absolute)."""
    return isinstance(rel, str) and _FILE_NAME.fullmatch(rel) is not None


def plain_job_id(name):
    return isinstance(name, str) and _JOB_ID.fullmatch(name) is not None


def _is_int(value, low=0, high=MAX_FILE_BYTES):
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _is_str_map(value):
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def _corrupted(why):
    _fail(f"checkpoint: {MANIFEST}: corrupted ({why})")


def layout_of(sizes):
    """(pack file sizes {name: size}, buffer table) the writer lays out for
    buffers of ``sizes`` (the same rule as _layout)."""
    files, table = {}, []
    name, end = None, 0
    for n in sizes:
        offset = -(-end // ALIGN) * ALIGN if name is not None else 0
        if name is None or (end > 0 and offset + n > PACK_BYTES):
            name, offset = f"{BLOBS}/{len(files):04d}.bin", 0
        end = offset + n
        files[name] = end
        table.append([name, offset, n])
    return files, table


def _chunk_ok(value):
    return _is_int(value, MIN_CHUNK_BYTES, MAX_CHUNK_BYTES) and value & (value - 1) == 0


def _check_tables(files, buffers, version=FORMAT_VERSION):
    if not isinstance(files, dict) or STATE not in files or not isinstance(buffers, list):
        _corrupted("no files or buffers table")
    for rel, rec in files.items():
        if not _FILE_NAME.fullmatch(rel):
            _corrupted(f"names a file {shown(rel)!r}, which is not one of a checkpoint's")
        # version 1: every file hashed whole; 2: pack files by sha256 chunks; 3:
        # by blake3 chunks (state.pickle: sha256 of the whole file in every version)
        digest = BLAKE3.name if version >= 3 and rel != STATE else SHA256.name
        keys = {"size", digest} if version == 1 or rel == STATE else \
            {"size", digest, "chunk"}
        if not isinstance(rec, dict) or set(rec) != keys or \
                not _is_int(rec["size"]) or not isinstance(rec[digest], str) or \
                not _SHA256.fullmatch(rec[digest]) or \
                ("chunk" in keys and not _chunk_ok(rec["chunk"])):
            _corrupted(f"bad entry for {rel!r}")
    for i, entry in enumerate(buffers):
        ok = isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str) and \
            _is_int(entry[1]) and _is_int(entry[2])
        if not ok:
            _corrupted(f"bad buffer entry {i}")
        rel, offset, size = entry
        if rel not in files or rel == STATE:
            _fail(f"checkpoint: {MANIFEST}: buffer {i} is in {shown(rel)!r}, which is not a "
                  f"recorded pack file")
        if offset % ALIGN:
            _fail(f"checkpoint: {MANIFEST}: buffer {i} is at offset {offset} of {rel}, "
                  f"not {ALIGN}-aligned")
        if offset + size > files[rel]["size"]:
            _fail(f"checkpoint: {MANIFEST}: buffer {i} lies outside {rel}")
    # The table must be the very layout the writer makes from these sizes: in
    # stream order, each buffer right after the one before it, no overlap, no
    # gap, no duplicate, no pack file that holds no buffer.
    packs, table = layout_of([entry[2] for entry in buffers])
    for i, (entry, want) in enumerate(zip(buffers, table)):
        if entry != want:
            _fail(f"checkpoint: {MANIFEST}: buffer {i} is at {entry[0]}:{entry[1]}, not where "
                  f"the writer puts it ({want[0]}:{want[1]}): the buffer table is damaged")
    recorded = {rel: rec["size"] for rel, rec in files.items() if rel != STATE}
    if recorded != packs:
        _fail(f"checkpoint: {MANIFEST}: its pack files ({', '.join(sorted(recorded)) or 'none'}) "
              f"are not those its buffers need ({', '.join(sorted(packs)) or 'none'}, of "
              f"those sizes): the buffer table is damaged")


def _check_fields(manifest):
    if not _is_int(manifest.get("total_bytes")):
        _corrupted("no total_bytes")
    job_id = manifest.get("job_id")
    if job_id is not None and not (isinstance(job_id, str) and _JOB_ID.fullmatch(job_id)):
        _corrupted("bad job_id")
    sources = manifest.get("sources", {})
    if not isinstance(sources, dict) or not all(isinstance(v, str) for v in sources.values()):
        _corrupted("bad sources table")
    runtime = manifest.get("runtime")
    if runtime is not None:
        ok = isinstance(runtime, dict) and isinstance(runtime.get("main_filename"), str) and \
            isinstance(runtime.get("cwd", ""), (str, type(None))) and \
            _is_str_map(runtime.get("environ", {})) and \
            isinstance(runtime.get("user_code", []), list) and \
            all(isinstance(p, str) for p in runtime.get("user_code", [])) and \
            _is_str_map(runtime.get("policy") or {}) and \
            isinstance(runtime.get("command", ""), str)
        if not ok:
            _corrupted("bad runtime context")
    for field in ("error", "loop"):
        if field in manifest and not isinstance(manifest[field], (dict, type(None))):
            _corrupted(f"bad {field}")
    for field in ("argv", "frames"):
        if field in manifest and not isinstance(manifest[field], (list, type(None))):
            _corrupted(f"bad {field}")


def check_manifest(manifest):
    """Refuse a manifest of another format, version or interpreter, and one whose
    tables or fields are not what the writer makes (signed or not: a user's own
    damaged manifest must not give wrong numbers)."""
    fmt = manifest.get("format")
    if fmt != FORMAT_NAME:
        _fail(f"checkpoint: unknown format {shown(fmt)!r} (expected {FORMAT_NAME!r})")
    version = manifest.get("format_version")
    if version not in SUPPORTED_VERSIONS or isinstance(version, bool):
        supported = ", ".join(str(v) for v in SUPPORTED_VERSIONS)
        _fail(f"checkpoint format version {shown(version)} is not supported by portal "
              f"{PORTAL_VERSION} (supports {supported})")
    if version >= 3:
        chunk_hash(version)               # refused by name if this build cannot hash it
    python = manifest.get("python")
    if not isinstance(python, dict):
        python = {}
    if python.get("magic") != PYTHON_MAGIC:
        _fail(f"checkpoint: written by python {shown(python.get('version', '?'))} "
              f"(bytecode magic {shown(python.get('magic'))}), this is python "
              f"{platform.python_version()} (magic {PYTHON_MAGIC})")
    _check_tables(manifest.get("files"), manifest.get("buffers"), version)
    _check_fields(manifest)


def check_job(manifest, job_id):
    """Refuse a checkpoint that is not of job ``job_id`` (a replayed or moved one:
    the job id is inside the signed bytes)."""
    theirs = manifest.get("job_id")
    if theirs is None:
        _fail(f"checkpoint: it names no job (made before checkpoints were bound to their "
              f"job), so it cannot be shown to be job {job_id}'s")
    if theirs != job_id:
        _fail(f"checkpoint: it belongs to job {shown(theirs)}, not {job_id} (replayed or moved)")


# Reading (docs/checkpoint-format.md, "Reading"): every file is read with large
# preads straight into the memory the state is built on (an anonymous private
# mapping per pack file: the arrays' and tensors' own memory, no second copy),
# chunk by chunk on worker threads that hash each chunk right after reading it;
# a chunk that lies in a hole of the file is neither read nor hashed (its
# memory stays the mapping's untouched zero pages).  Nothing is unpickled before
# every file's digest matched the signed manifest.

class _Opened:
    """One file of the checkpoint being read: its trusted descriptor, the memory
    it is read into, the digests of its chunks as they come."""

    def __init__(self, directory, rel, record, version):
        self.rel = rel
        self.chunk = record.get("chunk")          # None: hashed whole (version 1)
        self.hash = chunk_hash(version) if self.chunk else SHA256
        self.fd, size = open_trusted(directory, rel, "missing")
        try:
            want = record["size"]
            if size != want:
                why = "truncated" if size < want else "larger than recorded"
                _fail(f"checkpoint: {rel}: size {size} != {want} recorded ({why})")
            self.size = size
            self.expected = record[self.hash.name]
            # room for an aligned tail: O_DIRECT reads whole blocks
            self.data = (_anonymous(direct_read.round_up(size)) if rel != STATE
                         else bytearray(size))
            count = -(-size // self.chunk) if self.chunk else 0
            self.digests = [None] * count
            self.whole = None if self.chunk else hashlib.sha256()
            # O_DIRECT only into the page-aligned mapping (not a bytearray)
            self.reader = (direct_read.Reader(self.fd, size)
                           if isinstance(self.data, mmap.mmap) else None)
            if self.reader is not None and self.reader.direct_fd is None:
                self.reader = None
            if self.reader is None:       # buffered: the kernel's read-ahead helps
                try:
                    os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
                    os.posix_fadvise(self.fd, 0, READ_AHEAD, os.POSIX_FADV_WILLNEED)
                except OSError:
                    pass
        except BaseException:
            os.close(self.fd)
            raise

    def tasks(self):
        """[(start, end, index or None)] to read and hash; chunks in holes done."""
        if not self.chunk:
            return [(0, self.size, None)]
        extents = _data_extents(self.fd, self.size)
        out = []
        for index, start in enumerate(range(0, self.size, self.chunk)):
            end = min(start + self.chunk, self.size)
            if any(a < end and b > start for a, b in extents):
                out.append((start, end, index))
            else:
                self.digests[index] = zero_digest(end - start, self.hash)
        return out

    def read(self, start, end, index, progress):
        """Read [start, end) into its place and hash it (a worker thread)."""
        if self.reader is None:
            # The next READ_AHEAD bytes are fetched while this chunk is read and
            # hashed, so the disk never waits for the CPU: a cold 1 GiB read
            # measured 2x faster with it (docs/benchmarks.md).  Not with
            # O_DIRECT: the read-ahead would fill the page cache (read twice).
            try:
                os.posix_fadvise(self.fd, end, READ_AHEAD, os.POSIX_FADV_WILLNEED)
            except OSError:
                pass
        whole = memoryview(self.data)
        # the bytes past ``end`` up to the next block are room for an aligned tail
        view = whole[start:direct_read.round_up(end) if self.reader is not None else end]
        whole.release()
        try:
            h = self.whole if index is None else self.hash.new()
            for part in range(0, end - start, IO_CHUNK):
                n = min(IO_CHUNK, end - start - part)
                if self.reader is not None:
                    room = view[part:part + direct_read.round_up(n)]
                    self.reader.read(room, start + part, self._truncated)
                    room.release()
                    piece = view[part:part + n]
                else:
                    piece = view[part:part + n]
                    _pread_into(self.fd, piece, start + part, self)
                h.update(piece)
                if progress is not None:
                    progress.advance(piece.nbytes)
            if index is not None:
                self.digests[index] = h.digest()
        finally:
            view.release()

    def verified(self):
        if self.chunk:
            return chunks_digest(self.digests, self.hash) == self.expected
        return self.whole.hexdigest() == self.expected

    def _truncated(self, at):
        _fail(f"checkpoint: {self.rel}: size {at} != {self.size} recorded (truncated while read)")

    def close(self):
        if self.reader is not None:
            self.reader.close()
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def view(self):
        return memoryview(self.data)[:self.size]


def _pread_into(fd, view, offset, opened):
    pos, n = 0, view.nbytes
    while pos < n:
        got = os.preadv(fd, [view[pos:]], offset + pos)
        if got == 0:
            _fail(f"checkpoint: {opened.rel}: size {offset + pos} != {opened.size} recorded "
                  f"(truncated while read)")
        pos += got


def _anonymous(size):
    """Zero memory of ``size`` bytes that costs nothing until written: a private
    anonymous mapping (bytearray where mmap fails)."""
    if size == 0:
        return bytearray()
    # No MADV_HUGEPAGE: with this platform's THP defrag setting ("madvise") the
    # faults compact memory and a cold 256 MiB read measured 2.8x slower.
    try:
        return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except (OSError, ValueError):
        return bytearray(size)


def _data_extents(fd, size):
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
    if not isinstance(chunk, int) or not _chunk_ok(chunk):
        h = hashlib.sha256()
        pos = 0
        while True:
            data = os.pread(fd, IO_CHUNK, pos)
            if not data:
                return h.hexdigest()
            h.update(data)
            pos += len(data)
    extents = _data_extents(fd, size)
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


def _read_all(opened, progress):
    """Read and hash every file on worker threads; refuse any that differs."""
    tasks = [(o, t) for o in opened.values() for t in o.tasks()]
    if progress is not None:        # the holes: done without reading
        progress.advance(sum(o.size for o in opened.values()) -
                         sum(end - start for _, (start, end, _) in tasks))
    # whole-file hashes (version 1) are sequential: the biggest first
    tasks.sort(key=lambda item: item[1][2] is not None)
    with _Pool(_workers(), "portal-read") as pool:
        futures = [pool.submit(o.read, *t, progress) for o, t in tasks]
        try:
            for future in futures:
                future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    for o in opened.values():
        if not o.verified():
            _fail(f"checkpoint: {o.rel}: {o.hash.name} does not match the manifest (corrupted)")


def _read_source(filename):
    """A source file's bytes: O_NONBLOCK and a regular file (never waits on a FIFO)."""
    fd = os.open(filename, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read()
    finally:
        os.close(fd)


def _verify_sources(manifest):
    # A `-c` program's code string is kept in the (signed) manifest, not in a file:
    # the recompiler checks it against its sha256 when it compiles it.
    command_file = (manifest.get("runtime") or {}).get("main_filename") \
        if "command" in (manifest.get("runtime") or {}) else None
    for filename, sha in (manifest.get("sources") or {}).items():
        if filename == command_file:
            continue
        label = shown(filename)
        try:
            actual = sha256_hex(_read_source(filename))
        except FileNotFoundError:
            raise SourceChanged(label, "is missing") from None
        except (OSError, ValueError) as exc:
            raise SourceChanged(label, f"cannot be read: {shown(exc)}") from None
        if actual != sha:
            raise SourceChanged(label, f"has changed since the checkpoint was written "
                                f"(sha256 {actual[:12]}..., saved {shown(sha)[:12]}...)")


def read_manifest(path, *, key=None, job_id=None):
    """The manifest of checkpoint ``path`` (the link or a generation), trusted
    (owner, modes, HMAC over its raw bytes, then parsed), checked (format,
    version, interpreter, every table and field) and, given ``job_id``, of
    that job."""
    return load_manifest_bytes(read_manifest_bytes(locate(path)), key, job_id)


def check_subdirectory(directory, sub):
    """Refuse a subdirectory (``blobs``) of the checkpoint that is not a trusted one."""
    try:
        _open_dir(os.path.join(directory, sub), sub + "/")
    except FileNotFoundError:
        _fail(f"checkpoint: {sub}/: missing")


def subdirectories(records):
    return sorted({os.path.dirname(rel) for rel in records} - {""})


def _check_subdirectories(directory, records):
    for sub in subdirectories(records):
        check_subdirectory(directory, sub)


# The figures of the last read_checkpoint of this process: {bytes, seconds}
_last_read = {}


def last_read():
    """{"bytes": N, "seconds": S} of this process's last read_checkpoint (the
    files read and verified), or {} before one."""
    return dict(_last_read)


def read_checkpoint(path, recompiler, *, main_module=None, check_sources=True,
                    key=None, job_id=None):
    """(manifest, state) of the checkpoint at ``path``.

    Checks that every directory and file of it is the user's and writable by
    nobody else, the manifest's HMAC (made with ``key``, default the user's key),
    the format name and version, then the size and sha256 of every file,
    then (``check_sources``) the sources recorded in the manifest, all before
    unpickling anything.  The pack files are read (holes skipped) into private
    anonymous memory while they are hashed, and the out-of-band buffers are
    views of it: arrays and tensors are built on them without another copy.  ``main_module`` receives ``__main__``'s
    globals (default ``sys.modules['__main__']``); other user modules are created
    and registered in ``sys.modules``.  Given ``job_id``, a checkpoint of another
    job is refused.  Every error is a ``CheckpointError`` (``SourceChanged`` for
    a changed source), except ``MemoryError``.
    """
    directory = locate(path)
    manifest = load_manifest_bytes(read_manifest_bytes(directory), key, job_id)
    records = manifest["files"]
    _check_subdirectories(directory, records)
    opened = {}
    shown_progress = _progress.Progress("reading checkpoint", "checkpoint read",
                                        sum(rec["size"] for rec in records.values()))
    try:
        for rel, rec in records.items():
            opened[rel] = _Opened(directory, rel, rec, manifest["format_version"])
        _read_all(opened, shown_progress)
    except BaseException:
        shown_progress.abandon()
        raise
    finally:
        for o in opened.values():
            o.close()
    seconds = shown_progress.finish()
    if check_sources:
        _verify_sources(manifest)
    buffers = []
    for rel, offset, size in manifest["buffers"]:
        buffers.append(opened[rel].view()[offset:offset + size] if size else bytearray())
    stream = io.BytesIO(opened[STATE].data)
    del opened
    _last_read.update(bytes=manifest["total_bytes"], seconds=round(seconds, 3))
    loader = _reducers.Loader(stream, buffers=buffers, recompiler=recompiler,
                             main_module=main_module)
    try:
        state = loader.load_state()
    except MemoryError:
        raise
    except CodeChanged as exc:
        raise SourceChanged(exc.filename, exc.reason) from exc
    except CheckpointError:
        raise
    except Exception as exc:
        raise CheckpointError(f"checkpoint: {STATE}: cannot be loaded "
                              f"({type(exc).__name__}: {shown(exc)})") from exc
    return manifest, state
