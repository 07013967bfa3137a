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

from _portal import oom, safepoint

# Set by the runtime (runtime.py) before the program starts.
RUNTIME = None

RESERVE_BYTES = 32 << 20   # the rescue's imports and capture need a few MiB
_reserve = None


def arm_reserve():
    """Set the reserve aside (again); without it when memory is short now."""
    global _reserve
    if _reserve is None:
        try:
            _reserve = bytes(RESERVE_BYTES)
        except MemoryError:
            pass


def release_reserve():
    global _reserve
    _reserve = None


#: /proc/self/status and /proc/self/limits as read when the error reached the
#: rescue (shortage.py makes the suspension's "what ran short" line of them).
SHORTAGE = [None]


def _proc(path):
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


def note_shortage():
    """Two small reads, no import: memory may be short to the last page."""
    try:
        SHORTAGE[0] = (_proc("/proc/self/status"), _proc("/proc/self/limits"))
    except MemoryError:       # not even that: the line is left out
        SHORTAGE[0] = None


def rescue(loop_line, body_span=None):
    exc = sys.exception()
    if exc is None or not (oom.is_out_of_memory(exc) or safepoint.is_preempted(exc)):
        return
    runtime = RUNTIME
    if runtime is None or not runtime.rescue_enabled:
        return
    loop_frame = sys._getframe(1)
    # What the process had when it ran out of the host's memory (not a GPU's, not
    # the fake-OOM fixture's), before anything is freed.
    SHORTAGE[0] = None
    if runtime.fake_oom is None and (isinstance(exc, MemoryError) or "DefaultCPUAllocator" in str(exc)):
        note_shortage()
    release_reserve()
    skipped = runtime.rescue(loop_frame, loop_line, exc)
    arm_reserve()  # declined: the error goes on, the program may yet handle it
    return skipped is True  # True: the item was skipped (skip.py), the handler continues
