"""Writing a checkpoint (``write_checkpoint``): the pickle stream hashed as it is
written, the pack files chunk by chunk on worker threads (zero pages left as
holes), the signed manifest, then the commit protocol of format.py."""
import collections
import datetime
import hashlib
import json
import os
import platform
import re
import shutil
import sys
import tempfile

from _portal.checkpoint import progress as _progress
from _portal.checkpoint import reducers as _reducers
from _portal.checkpoint import workers
from _portal.checkpoint.format import (BLOBS, CHUNK_BYTES, FORMAT_NAME, IO_CHUNK, MANIFEST,
                                       PORTAL_VERSION, PYTHON_MAGIC, RESERVED, STATE,
                                       CheckpointError, CheckpointInfo, layout_of)
from _portal.checkpoint.hashing import (WRITE_HASH, WRITE_VERSION, ZERO_CHUNK, chunks_digest,
                                        data_runs, zero_digest)
from _portal.checkpoint.manifest import manifest_text
from _portal.run.codeindex import REGISTRY
from _portal.store import signing, trust as store

_write = os.write             # tests replace them to simulate a full disk
_pwrite = os.pwrite


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


def _create(path):
    """A new file, 0600 whatever the umask: a checkpoint is code (docs/security.md)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.fchmod(fd, 0o600)
    return fd


def _mkdir_private(path):
    os.mkdir(path, 0o700)
    os.chmod(path, 0o700)


def _layout(views):
    """Pack files for the buffers, laid out by format.layout_of:
    [(name, size, [(offset, view), ...])], table."""
    sizes, table = layout_of([view.nbytes for view in views])
    items = {name: [] for name in sizes}
    for (name, offset, _), view in zip(table, views):
        items[name].append((offset, view))
    return [(name, size, items[name]) for name, size in sizes.items()], table


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
    runs = [(offset, piece, data_runs(piece)) for offset, piece in pieces]
    if not any(r for _, _, r in runs):
        return zero_digest(end - start, WRITE_HASH)
    h = WRITE_HASH.new()
    pos = start
    for offset, piece, data in runs:
        if offset > pos:
            h.update(ZERO_CHUNK[:offset - pos])
        for a, b in data:
            _pwrite_all(fd, piece[a:b], offset + a)
        h.update(piece)
        pos = offset + piece.nbytes
    if end > pos:
        h.update(ZERO_CHUNK[:end - pos])
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
        with workers.Pool(workers.count(), "portal-write") as pool:
            records = _write_packs(pool, directory, files, fds, progress)
    finally:
        for fd in fds:              # only once no worker can still write to them
            os.close(fd)
    store.fsync_dir(os.path.join(directory, BLOBS))
    return records, table


def _write_packs(pool, directory, files, fds, progress):
    records = {}
    pending = collections.deque()
    ahead = 2 * workers.count()           # chunks in flight at most
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
        text = manifest_text(manifest, data_bytes, key)
        manifest = json.loads(text)
        fd = _create(os.path.join(tmp, MANIFEST))
        try:
            _write_all(fd, memoryview(text.encode("utf-8")))
            os.fsync(fd)
        finally:
            os.close(fd)
        store.fsync_dir(tmp)
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
        store.fsync_dir(parent)
        try:
            os.unlink(link_tmp)
        except FileNotFoundError:
            pass
        os.symlink(f"{name}.{gen}", link_tmp)
        os.rename(link_tmp, link)          # the commit point
        committed = True
        store.fsync_dir(parent)
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
