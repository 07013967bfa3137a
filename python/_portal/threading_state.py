"""Locks, conditions, events and semaphores of the program (a plug-in, see plugins.py).

| object | saved as | restored as |
|---|---|---|
| `threading.Lock()` (`_thread.lock`) | locked or not | a new lock, acquired if it was locked |
| `threading.RLock()` (`_thread.RLock`) | its owner's count, when the main thread owns it | a new RLock acquired that many times by the main thread; one another thread held is restored free |
| `threading.Condition` | its lock and class dict, no waiters | the same, with no thread waiting |
| `threading.Event`, `Semaphore`, `BoundedSemaphore` | their condition and flag/value (plain Python objects) | the same |
| `threading.Thread` | never | refused: a running thread's frames cannot be saved |

The capture runs in the main thread (other threads decline, suspend.py), with
the program's other threads still running: a lock that the main thread holds
where the loop continues (`with lock:` around the loop) must be held again, or
the block's exit would fail.  A plain Lock does not know its holder: one that
another thread held at that moment is restored held too (no thread is restored
to release it); an RLock knows, and is restored free.  A thread object is
refused, naming it: an object that starts one (a TensorBoard-style writer's
flush thread) can be saved when its class says how, by `__getstate__` leaving
the thread out and `__setstate__` starting a new one.
"""
import sys

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
        return (_rb_rlock, (count,))
    return reduce_rlock


def _reduce_lock(lock):
    return (_rb_lock, (lock.locked(),))


def _reduce_condition(cond):
    state = {k: v for k, v in cond.__dict__.items() if k != "_waiters"}
    return (_rb_condition, (type(cond), state))


def _refuse_thread(thread):
    from _portal.reducers import _Refuse
    raise _Refuse(f"a thread ({thread.name}) cannot be saved: its frames run outside the loop")


def reducers():
    import _thread
    out = {_thread.LockType: _reduce_lock,
           _thread.RLock: _rlock_reducer(_thread.get_ident())}
    return out


def subclass_reducers():
    threading = sys.modules.get("threading")
    if threading is None:
        return {}
    return {threading.Condition: _reduce_condition, threading.Thread: _refuse_thread}
