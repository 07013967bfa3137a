"""Locks, conditions, events and semaphores of the program (a plug-in, see plugins.py).

| object | saved as | restored as |
|---|---|---|
| `threading.Lock()` (`_thread.lock`) | locked or not | a new lock, acquired if it was locked |
| `threading.RLock()` (`_thread.RLock`) | its owner's count, when the main thread owns it | a new RLock acquired that many times by the main thread; one another thread held is restored free |
| `threading.Condition` | its lock and class dict, no waiters | the same, with no thread waiting |
| `threading.Event`, `Semaphore`, `BoundedSemaphore` | their condition and flag/value (plain Python objects) | the same |
| `threading.Thread` waiting where a restart would bring it (below) | its class, target, arguments, name, daemon flag and its own attributes | a new thread of that class, started once the whole state is restored: its function runs again from its start, to the same wait |
| a `threading.Thread` never started | the same | a new thread of that class, not started |
| a `threading.Thread` that has ended | the same | a new thread of that class, started on nothing and joined: `join()` returns, `is_alive()` is false, `start()` refuses |
| the main thread | a reference | the new process's main thread |
| any other `threading.Thread` | never | refused, saying why: a running thread's frames cannot be saved |

The capture runs in the main thread (other threads decline, suspend.py), with
the program's other threads still running: a lock that the main thread holds
where the loop continues (`with lock:` around the loop) must be held again, or
the block's exit would fail.  A plain Lock does not know its holder: one that
another thread held at that moment is restored held too (no thread is restored
to release it); an RLock knows, and is restored free.  A running thread is
refused, naming it and why, unless it is *restartable*.

**Restartable threads** (a TensorBoard-style writer's flush thread: an open event
file, a lock, a queue and an Event, as `torch.utils.tensorboard` and makemore's
SummaryWriter have).  Such a thread spends its life waiting: `queue.get(timeout=)`,
`event.wait(interval)`, `condition.wait()`.  At the capture (freeze(), before
decide.py's trial), each other thread is looked at (its frames:
sys._current_frames) and is restartable when

  * its innermost frame is `threading.Condition.wait` (Event.wait and Queue.get
    wait there), called through threading's and queue's functions that have done
    nothing yet while they wait (Condition.wait/wait_for, Event.wait,
    Semaphore.acquire, Queue.get/put/join; not Barrier.wait, which has counted
    the thread in), from the thread's own frames: its function (its target, or
    its class's `run`) and what that called, down to the wait;
  * each of those frames is at a call reached from its function's start by a path
    that changes nothing but its locals, and every local read after the call is
    its argument or computed again on that path in the same iteration
    (thread_restart.py says exactly what passes: tensorboard's
    `_AsyncWriterThread`, whose `_run()` computes its wait from its next flush
    time and waits in `queue.get(True, wait)` inside a `try`, does).

Its function run again from its start then comes to the same wait, with the
locals computed again.  The thread is held
there while the state is saved: the condition's lock is taken (the thread cannot
leave wait() without it), so the queue it would empty, the file it would write
and the objects it would change are saved as one moment's; the lock is saved as
it was before Portal took it, and given back if the loop declines (thaw()); if
the job is suspended the process ends with the thread still held.  At the resume
a new thread is made (Thread.__init__ with the saved target, arguments, name and
daemon flag, then the thread's own attributes: a subclass's queue, writer ...)
and started after everything else is restored.  Not restartable: a thread in
`time.sleep()` (nothing can hold it), busy for longer than SETTLE_SECONDS, or
waiting where a restart would not bring it (the reason names the line or the
local: `its loop keeps batch in locals`).
"""
import sys
import time

from _portal.bytecode import frame_locals
from _portal.checkpoint.refusals import Refuse

_RLOCK_REPR_OWNER = "owner="
_RLOCK_REPR_COUNT = "count="


def _rb_lock(locked):
    import _thread
    lock = _thread.allocate_lock()
    if locked:
        lock.acquire()
    return lock


def _rb_rlock(count):
    import _thread
    lock = _thread.RLock()
    for _ in range(count):
        lock.acquire()
    return lock


def _rb_condition(cls, state):
    import collections
    cond = cls.__new__(cls)
    cond.__dict__.update(state)
    cond._waiters = collections.deque()
    return cond


def _repr_field(text, name):
    start = text.find(name)
    if start < 0:
        return None
    start += len(name)
    end = start
    while end < len(text) and text[end].isdigit():
        end += 1
    return int(text[start:end]) if end > start else None


def _rlock_reducer(main_ident):
    def reduce_rlock(lock):
        # The owner and count are only in the repr (the pickler runs in a thread
        # of its own: _is_owned() would ask about that thread).
        text = repr(lock)
        owner = _repr_field(text, _RLOCK_REPR_OWNER)
        count = _repr_field(text, _RLOCK_REPR_COUNT) or 0
        if owner != main_ident:
            count = 0   # held by another thread, which is not restored
        elif id(lock) in _HELD:
            count -= 1  # taken by freeze(), not by the program
        return (_rb_rlock, (count,))
    return reduce_rlock


def _reduce_lock(lock):
    return (_rb_lock, (lock.locked() and id(lock) not in _HELD,))


def _reduce_condition(cond):
    state = {k: v for k, v in cond.__dict__.items() if k != "_waiters"}
    return (_rb_condition, (type(cond), state))


# --- threads ---------------------------------------------------------------------------

# id(lock) -> (lock, [threads held by it]) for the condition locks freeze() took.
_HELD = {}
# How long freeze() waits for a waiting thread's condition lock (the thread holds it
# only between two waits: microseconds; the program's main thread is in the rescue).
HOLD_TIMEOUT_SECONDS = 1.0
# How long freeze() waits for a busy thread (its function one while loop) to come
# back to its wait, and how often it looks.
SETTLE_SECONDS = 0.5
SETTLE_POLL_SECONDS = 0.001
# Threads rebuilt by the restore, started by restore_process() once all is loaded.
_TO_START = []
# Threads that had ended, started on nothing and joined by restore_process().
_TO_FINISH = []
_LIBRARY = ("threading", "queue")


def _library_files():
    return {getattr(sys.modules.get(name), "__file__", None) for name in _LIBRARY} - {None}


def _own_function(thread):
    """The function the thread runs: its target, or its class's run()."""
    threading = sys.modules["threading"]
    if type(thread).run is threading.Thread.run:
        return getattr(thread, "_target", None)
    return getattr(thread, "run", None)


def _own_code(thread):
    function = _own_function(thread)
    return getattr(getattr(function, "__func__", function), "__code__", None)


def _waiting_condition(thread, frame):
    """The Condition the thread waits on where a restart would bring it, or why not
    (str)."""
    threading = sys.modules["threading"]
    library = _library_files()
    inner = frame
    if inner is None or inner.f_code is not threading.Condition.wait.__code__:
        return _NOT_WAITING
    # read in place: the waiting thread's frame is neither written nor kept alive
    condition = frame_locals.value(inner, "self")
    own = inner.f_back
    entries = _waiting_entries()
    called, unknown = None, False   # the library function the thread's own code called
    while own is not None and own.f_code.co_filename in library:
        unknown = unknown or own.f_code not in entries   # Barrier.wait: counted in already
        called, own = own, own.f_back
    if unknown:
        name = getattr(called.f_code, "co_qualname", called.f_code.co_name)
        return f"it waits in {name}(), which a restart would enter again"
    chain = []    # the thread's own frames, innermost first, down to threading's
    while own is not None and own.f_code.co_filename not in library:
        chain.append(own)
        own = own.f_back
    code = _own_code(thread)
    if not chain or code is None or chain[-1].f_code is not code:
        return "it waits outside its own function"
    from _portal.state import thread_restart
    for own in chain:
        why = thread_restart.why_not_restartable(own, condition)
        if why is not None:
            return why
    return condition


def _waiting_entries():
    """The codes of threading's and queue's functions that have done nothing yet
    while they wait on their Condition: called again, they wait again."""
    threading, queue = sys.modules["threading"], sys.modules.get("queue")
    functions = [threading.Condition.wait_for, threading.Event.wait, threading.Semaphore.acquire]
    if queue is not None:
        functions += [queue.Queue.get, queue.Queue.put, queue.Queue.join]
    return {getattr(f, "__code__", None) for f in functions}


_NOT_WAITING = "it is not waiting on a Condition, Event or Queue"
# Why a thread is not held that may change while freeze() looks again.
_TRANSIENT = (_NOT_WAITING, "its condition's lock stayed taken", "it did not stay waiting")


def freeze():
    """Hold every restartable thread at its wait (the module's docstring) while the
    state is saved; why not, for the others (their refusal says it).  A thread
    that is not waiting (busy writing a record) is given up to SETTLE_SECONDS to
    come back to a wait."""
    threading = sys.modules.get("threading")
    _NOT_RESTARTABLE.clear()
    _SAVED.clear()
    if threading is None:
        return
    skip = {threading.get_ident(), threading.main_thread().ident}
    waiting = [t for t in threading.enumerate()
               if t.ident not in skip and not t.name.startswith("portal-")]
    deadline = time.monotonic() + SETTLE_SECONDS
    while waiting:
        frames = sys._current_frames()
        busy = []
        for thread in waiting:
            try:
                why = _hold(thread, frames.get(thread.ident))
            except Exception as error:   # a shape the analysis does not know: not held
                why = f"its frames could not be read ({type(error).__name__}: {error})"
            if why is not None:
                _NOT_RESTARTABLE[thread.ident] = why
                if why in _TRANSIENT:
                    busy.append(thread)     # may come back to its wait
        del frames
        if not busy or time.monotonic() > deadline:
            return
        waiting = busy
        time.sleep(SETTLE_POLL_SECONDS)


def _hold(thread, frame):
    """Take the lock of the Condition the thread waits on where a restart would
    bring it; None when held, else why not."""
    found = _waiting_condition(thread, frame)
    if isinstance(found, str):
        return found
    lock = getattr(found, "_lock", None)
    if lock is not None and id(lock) in _HELD:
        # another thread waiting on the same Condition is held by it: this one
        # cannot leave its wait either, if it is still there
        if _waiting_condition(thread, sys._current_frames().get(thread.ident)) is not found:
            return "it did not stay waiting"
        _HELD[id(lock)][1].append(thread)
        _NOT_RESTARTABLE.pop(thread.ident, None)
        return None
    if lock is None or not lock.acquire(timeout=HOLD_TIMEOUT_SECONDS):
        return "its condition's lock stayed taken"
    try:
        again = _waiting_condition(thread, sys._current_frames().get(thread.ident))
    except BaseException:
        lock.release()
        raise
    if again is not found:
        lock.release()   # it left its wait before the lock was taken
        return "it did not stay waiting"
    _HELD[id(lock)] = (lock, [thread])
    _NOT_RESTARTABLE.pop(thread.ident, None)
    return None


def thaw(keep=()):
    """Give back the locks freeze() took: the threads go on (the loop declined), but
    for those whose ids are in `keep`."""
    for key, (lock, threads) in list(_HELD.items()):
        if any(id(thread) in keep for thread in threads):
            continue
        del _HELD[key]
        try:
            lock.release()
        except RuntimeError:
            pass


def thaw_unsaved():
    """After the trial pickling: only the threads the state holds stay held, so
    that nothing the capture does after (freeing frames: a __del__ may set an
    Event) waits on a lock taken for a thread the checkpoint does not need."""
    thaw(keep=set(_SAVED))
    _SAVED.clear()


_SAVED = set()   # ids of the held threads the trial pickling met


_NOT_RESTARTABLE = {}   # thread ident -> why it is not restartable (freeze())


def _held(thread):
    return any(t is thread for _, threads in _HELD.values() for t in threads)


def _thread_fields():
    threading = sys.modules["threading"]
    return frozenset(vars(threading.Thread()).keys())


def _rb_thread(cls, init, own, life="restart"):
    """A new thread of the saved class: started once the whole state is restored
    ("restart"), left unstarted ("new"), or started on nothing and joined there
    ("finished": join() returns, is_alive() is false, start() refuses, as after
    the program's own thread ended)."""
    import threading
    thread = cls.__new__(cls)
    threading.Thread.__init__(thread, **init)
    thread.__dict__.update(own)
    if life == "restart":
        _TO_START.append(thread)
    elif life == "finished":
        _TO_FINISH.append(thread)
    return thread


def _rb_main_thread():
    import threading
    return threading.main_thread()


def _life(thread):
    """"new" for a thread never started, "finished" for one that has ended, else
    None."""
    started = getattr(thread, "_started", None)
    if thread.ident is None and started is not None and not started.is_set():
        return "new"
    if thread.ident is not None and not thread.is_alive():
        return "finished"
    return None


def _reduce_thread(thread):
    threading = sys.modules["threading"]
    if thread is threading.main_thread():
        return (_rb_main_thread, ())
    life = "restart" if _held(thread) else _life(thread)
    if life is None:
        why = _NOT_RESTARTABLE.get(thread.ident, "it is not waiting")
        raise Refuse(f"a thread ({thread.name}) cannot be saved: its frames run outside the loop "
                      f"and it cannot be started again where it is ({why})")
    if life == "restart":
        _SAVED.add(id(thread))
    internal = _thread_fields()
    # an ended Thread.run deletes its target and arguments
    init = {"target": getattr(thread, "_target", None), "name": thread.name,
            "args": getattr(thread, "_args", ()), "kwargs": getattr(thread, "_kwargs", {}),
            "daemon": thread.daemon}
    own = {k: v for k, v in vars(thread).items() if k not in internal}
    return (_rb_thread, (type(thread), init, own, life))


def _nothing():
    pass


def capture_process():
    # A marker, so that restore_process() runs and starts the threads.
    return True if "threading" in sys.modules else None


def restore_process(_saved):
    while _TO_FINISH:
        thread = _TO_FINISH.pop(0)
        thread.run = _nothing      # the instance's run, not its class's: it did run
        try:
            thread.start()
            thread.join()
        finally:
            del thread.run
    while _TO_START:
        _TO_START.pop(0).start()


def reducers(context):
    import _thread
    out = {_thread.LockType: _reduce_lock,
           _thread.RLock: _rlock_reducer(_thread.get_ident())}
    return out


def subclass_reducers(context):
    threading = sys.modules.get("threading")
    if threading is None:
        return {}
    return {threading.Condition: _reduce_condition, threading.Thread: _reduce_thread}
