"""The rescue: what runs when an exception reaches a wrapped loop body.

Every loop body of the user's code is wrapped (instrument.py) as

    try: BODY
    except Exception:
        if __portal_rescue__(LOOP_LINE):   # True: skipped (oom.action=skip)
            __portal_rescue__; continue
        raise

so that an exception passing through a loop calls rescue() here, innermost loop
first, while that loop's frame is still running.  A while statement is wrapped
whole (no extra instruction per iteration) and its call passes the body's source
span too; an error of its condition or else clause is declined (suspend.py).
The stages, in order:
  1. decide (decide.py, every rule, before anything is freed): out of memory?
     a thread, a coroutine, a torch.distributed group?  inside an optimizer
     step?  taken by a handler of the user's own further out?  (else return:
     the error goes on, its frames untouched)
  2. capture the chain of frames from __main__ to this loop (capture.py, called
     by decide.py); a loop that cannot be re-entered, whose state cannot be
     saved, or (oom.exact=true) where something will differ declines, and the
     next loop out tries
  3. free the frames inside the loop (their memory: activations, temporaries)
  4. save: process state, modules, the checkpoint (suspend.py)
  5. suspend: say where and how to resume, exit 75
Returning (declining) lets the `raise` re-raise the error unchanged.

The memory reserve: when the program has run out, the rescue itself needs memory
before it can free any (its modules are imported only now, the frames are
captured, the traceback formatted).  So the runtime sets a little aside when the
program starts and gives it back first thing in a rescue.  It is a bytes object
of zero pages that are never touched: the memory tripwire's cap (RLIMIT_DATA)
counts them, the machine does not.  (Under the resident cap, a memory request
lets it go too: safepoint.py.)
"""
import os
import sys

from _portal.rescue import oom, safepoint

RESERVE_BYTES = 32 << 20   # the rescue's imports and capture need a few MiB


#: Address space the rescue adds to the soft RLIMIT_DATA while it runs (under
#: the resident cap the watcher gives it the ceiling back besides): the
#: pickling thread's 64 MiB stack (reducers.py) and the writer's threads are
#: address space the memory tripwire's cap counts, and the cap is full when the
#: rescue runs.  Their pages are barely touched: the cap's reserve (at least 256
#: MiB below the machine or --mem, tripwire.hpp) holds what is.
RESCUE_ROOM_BYTES = 128 << 20


#: How long the rescue waits for the resident cap's watcher to give the limit its
#: ceiling back (it looks every 5 ms near the cap).
ROOM_WAIT_SECONDS = 0.2


def widen_data_limit():
    """Raise the soft RLIMIT_DATA by RESCUE_ROOM_BYTES (never past the hard
    limit) and, under the resident cap, ask its watcher to hold the limit at its
    ceiling while the rescue runs (it would lower it again as resident memory
    grows).  Returns what narrow_data_limit() needs, or None."""
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        if soft == resource.RLIM_INFINITY:
            return None
        wide = soft + RESCUE_ROOM_BYTES if hard == resource.RLIM_INFINITY else min(hard, soft + RESCUE_ROOM_BYTES)
        if wide > soft:
            resource.setrlimit(resource.RLIMIT_DATA, (wide, hard))
        asked = safepoint.ask_for_room()
        if asked:
            import time
            deadline = time.monotonic() + ROOM_WAIT_SECONDS
            while resource.getrlimit(resource.RLIMIT_DATA)[0] == wide and time.monotonic() < deadline:
                time.sleep(0.002)
        return soft, wide, asked
    except (ImportError, OSError, ValueError, MemoryError):
        return None


def narrow_data_limit(widened):
    """The rescue declined: the watcher watches as before, and the limit is put
    back as it was unless the watcher has set another meanwhile."""
    if widened is None:
        return
    soft, wide, asked = widened
    if asked:
        safepoint.ask_for_room()
        return
    try:
        import resource
        now, hard = resource.getrlimit(resource.RLIMIT_DATA)
        if now == wide and wide > soft:
            resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
    except (ImportError, OSError, ValueError, MemoryError):
        pass


def read_proc(path):
    """A /proc file's first 8 KiB (b"" where it cannot be read): no import."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        return os.read(fd, 8192)
    except OSError:
        return b""
    finally:
        os.close(fd)


class Rescuer:
    """The rescue's entry, ``__portal_rescue__`` (a bound method of the one the
    runtime makes at start-up), and what it holds from the program's start to a
    rescue: the runtime, the reserve, whether a rescue is running now (safepoint.py:
    the watcher's request waits for none), and what the process had when the error
    came (shortage.py makes the suspension's "what ran short" line of it)."""

    def __init__(self, runtime):
        self.runtime = runtime
        self.reserve = None
        self.rescuing = False
        self.shortage = None    # (/proc/self/status, /proc/self/limits) bytes, or None

    def arm_reserve(self):
        """Set the reserve aside (again); without it when memory is short now."""
        if self.reserve is None:
            try:
                self.reserve = bytes(RESERVE_BYTES)
            except MemoryError:
                pass

    def release_reserve(self):
        self.reserve = None

    def note_shortage(self):
        """Two small reads, no import: memory may be short to the last page."""
        try:
            self.shortage = (read_proc("/proc/self/status"), read_proc("/proc/self/limits"))
        except MemoryError:       # not even that: the line is left out
            self.shortage = None

    def rescue(self, loop_line, body_span=None):
        exc = sys.exception()
        if exc is None or not (oom.is_out_of_memory(exc) or safepoint.is_preempted(exc)):
            return
        runtime = self.runtime
        if not runtime.rescue_enabled:
            return
        loop_frame = sys._getframe(1)
        # What the process had when it ran out of the host's memory (not a GPU's, not
        # the fake-OOM fixture's), before anything is freed.
        self.shortage = None
        if runtime.fake_oom is None and (isinstance(exc, MemoryError) or
                                         "DefaultCPUAllocator" in str(exc)):
            self.note_shortage()
        self.release_reserve()
        # Every import from here on (resource, pickle, json ...) comes from Portal's own
        # path, never from the working directory or the program's directory.
        runtime.enter_rescue()
        try:
            widened = widen_data_limit()
            self.rescuing = True
            try:
                skipped = runtime.rescue(loop_frame, loop_line, exc)
            finally:
                self.rescuing = False
            narrow_data_limit(widened)
        finally:
            runtime.leave_rescue()
        self.arm_reserve()  # declined: the error goes on, the program may yet handle it
        return skipped is True  # True: the item was skipped (skip.py), the handler continues
