"""Reading a checkpoint's pack file at the disk's speed: the one door for how
its bytes get from the file into the memory the tensors are built on.

A buffered read costs the kernel a copy from the page cache into the mapping
and a fault per destination page: measured ~0.6 s CPU per GiB on this
project's 2-core machine, more than the disk needs to deliver the bytes.  An
O_DIRECT read lets the device write straight into the destination (pages
pinned in bulk, no page-cache copy), leaving only the hash on the CPU
(docs/benchmarks.md, "Issue 14: direct reads").

But a file whose pages are already in the page cache (warm: just written, or
read again) is read faster from memory than from the disk.  So each chunk asks
the kernel first (cachestat(2), Linux 6.5+) how much of it is cached: a chunk
wholly cached is read buffered, any other O_DIRECT.  (preadv2(RWF_NOWAIT) is
no probe: on a miss it starts the read-ahead, and the file ends up read twice.)

O_DIRECT wants the file offset, the length and the buffer aligned to the
device's logical block; ALIGN (4096) covers every block size in use.  Chunks
start at multiples of ALIGN, the destination is a page-aligned mapping one
page longer than needed at most, and the file's tail is read with a length
rounded up (the read returns short at the end of the file).  Where O_DIRECT is
refused (a filesystem without it, a reopen that fails, an odd short read) the
read falls back to buffered: never wrong, only slower.
"""

import ctypes
import errno
import os

ALIGN = 4096                  # O_DIRECT alignment of offsets, lengths and buffers
_CACHESTAT = 451              # cachestat(2): the same number on every architecture
_O_DIRECT = getattr(os, "O_DIRECT", 0)


class _Range(ctypes.Structure):           # struct cachestat_range, <linux/mman.h>
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):            # struct cachestat, <linux/mman.h>
    _fields_ = [("nr_cache", ctypes.c_uint64), ("nr_dirty", ctypes.c_uint64),
                ("nr_writeback", ctypes.c_uint64), ("nr_evicted", ctypes.c_uint64),
                ("nr_recently_evicted", ctypes.c_uint64)]


_SYSCALL = []


def _syscall():
    """libc's syscall(2) through ctypes, or None."""
    if not _SYSCALL:
        fn = None
        try:
            fn = ctypes.CDLL(None, use_errno=True).syscall
            fn.restype = ctypes.c_long
        except (OSError, AttributeError):
            fn = None
        _SYSCALL.append(fn)
    return _SYSCALL[0]


def round_up(n):
    return -(-n // ALIGN) * ALIGN


def cached_pages(fd, start, length):
    """Pages of [start, start + length) of ``fd`` in the page cache, or None
    where the kernel cannot tell (no cachestat: before Linux 6.5)."""
    fn = _syscall()
    if fn is None:
        return None
    rng, st = _Range(start, length), _Stat()
    if fn(ctypes.c_long(_CACHESTAT), ctypes.c_int(fd), ctypes.byref(rng),
          ctypes.byref(st), ctypes.c_uint(0)) != 0:
        return None
    return st.nr_cache


class Reader:
    """Reads chunks of one open file ``fd`` (``size`` bytes) into aligned memory."""

    def __init__(self, fd, size):
        self.fd = fd
        self.size = size
        self.direct_fd = _reopen_direct(fd)

    def close(self):
        if self.direct_fd is not None:
            os.close(self.direct_fd)
            self.direct_fd = None

    def read(self, view, offset, truncated):
        """Fill ``view`` (a memoryview of the destination; its start page-aligned)
        with the file's bytes from ``offset`` (a multiple of ALIGN) on, up to
        ``view.nbytes`` or the end of the file; the bytes it may hold past that
        are its room for an aligned tail.  ``truncated(at)`` raises where the
        file ends early.  Returns "direct" or "buffered"."""
        want = min(view.nbytes, self.size - offset)
        how = "buffered"
        pos = 0
        if self.direct_fd is not None and offset % ALIGN == 0 and not self._cached(offset, want):
            how = "direct"
            span = min(round_up(want), view.nbytes)
            while pos < want:
                if pos % ALIGN or span % ALIGN:
                    break                          # an odd short read: the rest buffered
                try:
                    got = os.preadv(self.direct_fd, [view[pos:span]], offset + pos)
                except OSError as exc:
                    if exc.errno != errno.EINVAL:
                        raise
                    os.close(self.direct_fd)      # refused after all: buffered from now on
                    self.direct_fd = None
                    break
                if got == 0:
                    truncated(offset + pos)
                pos += got
            pos = min(pos, want)
        while pos < want:
            got = os.preadv(self.fd, [view[pos:want]], offset + pos)
            if got == 0:
                truncated(offset + pos)
            pos += got
        return how

    def _cached(self, offset, length):
        pages = cached_pages(self.fd, offset, length)
        # unknown: O_DIRECT (the page cache would be filled at a copy's cost)
        return pages is not None and pages >= -(-length // ALIGN)


def _reopen_direct(fd):
    """A second descriptor of the same open file with O_DIRECT, or None where the
    platform or filesystem refuses it.  Reopened through /proc/self/fd, not by
    name: the file was opened with its trust checked, and a name could have been
    replaced since; the inode is compared besides."""
    if not _O_DIRECT:
        return None
    try:
        direct = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        a, b = os.fstat(fd), os.fstat(direct)
        if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino):
            return direct
    except OSError:
        pass
    os.close(direct)
    return None
