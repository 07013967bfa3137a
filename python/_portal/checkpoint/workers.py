"""The threads that write, read and hash a checkpoint's chunks, started only as
work comes and never required: with none, the calling thread does the work."""
import os
import threading
from _queue import SimpleQueue
from concurrent.futures import Future


def count():
    """Threads that write or read and hash chunks: sha256, zero scans, pread and
    pwrite all release the GIL; at least two, so that I/O and hashing overlap."""
    return max(2, min(IO_THREADS, 2 * (os.cpu_count() or 1)))


IO_THREADS = 8                # at most this many I/O and hashing threads
#: Their C stack: hashing, zero scans and pread/pwrite need little of it.  A
#: thread's stack is address space that the memory tripwire's cap counts
#: (RLIMIT_DATA), and the writer runs when that is what ran short.
IO_THREAD_STACK_BYTES = 256 << 10


class Pool:
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
