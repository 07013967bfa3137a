"""Reading a checkpoint (docs/checkpoint-format.md, "Reading"): find its
generation through the link, trust every directory and file of it through the
store's rule (store/trust.py), verify the signed manifest and every file's
digest, and only then unpickle.  ``portal inspect`` opens a checkpoint through
the same functions (locate, open_trusted, read_manifest_bytes)."""
import errno
import hashlib
import io
import mmap
import os
import stat

from _portal.checkpoint import direct_read, workers
from _portal.checkpoint import progress as _progress
from _portal.checkpoint.loader import Loader
from _portal.checkpoint.format import (IO_CHUNK, MANIFEST, MAX_MANIFEST_BYTES, READ_AHEAD, STATE,
                                       CheckpointError, SourceChanged, fail, generation_name,
                                       subdirectories)
from _portal.checkpoint.hashing import SHA256, chunk_hash, chunks_digest, data_extents, zero_digest
from _portal.checkpoint.manifest import load_manifest_bytes
from _portal.run.codeindex import CodeChanged, sha256_hex
from _portal.store import trust as store
from _portal.store.trust import shown

# Trust (docs/security.md): a checkpoint is code, so before anything of it is used,
# every directory and file of it must be the user's own and writable by nobody
# else, and the manifest's HMAC must have been made with the user's key.  The
# manifest lists every other file's size and sha256, so the HMAC covers them all.

def _open_dir(path, label):
    """Refuse the directory ``path`` unless it is the user's own (store.open_dir:
    O_DIRECTORY|O_NOFOLLOW, checked on the descriptor)."""
    try:
        os.close(store.open_dir(path, label=label, trust=store.trust_problem,
                                untrusted="it is not trusted"))
    except store.StoreError as exc:
        fail(f"checkpoint: {exc}")


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
        fail(f"checkpoint: {shown(path)}: no such checkpoint")
    except OSError as exc:
        fail(f"checkpoint: {shown(path)}: cannot be read ({str(exc.strerror or exc).lower()})")
    directory = link
    if stat.S_ISLNK(st.st_mode):
        parent = os.path.dirname(link)
        _open_dir(parent, parent)
        if st.st_uid != store.euid():
            fail(f"checkpoint: {link}: is owned by uid {st.st_uid}, not by you (uid "
                  f"{store.euid()}); it is not trusted")
        target = os.readlink(link)
        if not generation_name(os.path.basename(link), target):
            fail(f"checkpoint: {link}: points to {shown(target)!r}, not to a generation "
                  f"beside it; it is not trusted")
        directory = os.path.join(parent, target)
    try:
        _open_dir(directory, directory)
    except FileNotFoundError:
        fail(f"checkpoint: {shown(path)}: no such checkpoint")
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
                                  trust=store.trust_problem, untrusted="it is not trusted")
    except FileNotFoundError:
        fail(f"checkpoint: {rel}: {missing}")
    except store.StoreError as exc:
        fail(f"checkpoint: {exc}")


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
        fail(f"checkpoint: {MANIFEST}: is larger than {MAX_MANIFEST_BYTES} bytes (not a manifest)")
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
                fail(f"checkpoint: {rel}: size {size} != {want} recorded ({why})")
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
        extents = data_extents(self.fd, self.size)
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
        fail(f"checkpoint: {self.rel}: size {at} != {self.size} recorded (truncated while read)")

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
            fail(f"checkpoint: {opened.rel}: size {offset + pos} != {opened.size} recorded "
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


def _read_all(opened, progress):
    """Read and hash every file on worker threads; refuse any that differs."""
    tasks = [(o, t) for o in opened.values() for t in o.tasks()]
    if progress is not None:        # the holes: done without reading
        progress.advance(sum(o.size for o in opened.values()) -
                         sum(end - start for _, (start, end, _) in tasks))
    # whole-file hashes (version 1) are sequential: the biggest first
    tasks.sort(key=lambda item: item[1][2] is not None)
    with workers.Pool(workers.count(), "portal-read") as pool:
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
            fail(f"checkpoint: {o.rel}: {o.hash.name} does not match the manifest (corrupted)")


def read_source(filename):
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
            actual = sha256_hex(read_source(filename))
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
        fail(f"checkpoint: {sub}/: missing")


def _check_subdirectories(directory, records):
    for sub in subdirectories(records):
        check_subdirectory(directory, sub)


def read_checkpoint(path, recompiler, *, main_module=None, check_sources=True,
                    key=None, job_id=None, figures=None):
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
    job is refused.  ``figures``, a dict, receives {"bytes": N, "seconds": S}:
    the files read and verified, and how long that took.  Every error is a ``CheckpointError`` (``SourceChanged`` for
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
    if figures is not None:
        figures.update(bytes=manifest["total_bytes"], seconds=round(seconds, 3))
    loader = Loader(stream, buffers=buffers, recompiler=recompiler, main_module=main_module)
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
