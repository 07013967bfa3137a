"""Saving tqdm progress bars (a plug-in: plugins.MODULES).

`for batch in tqdm(loader)` iterates tqdm.__iter__, a generator of library code
(saved by generators.py, its frame's locals with it: the bar, the count `n` it
keeps in a local, the loader's iterator on its stack).  The bar itself holds what
pickle refuses: its output stream wrapped in tqdm's DisableOnWriteError, a
status-printer closure, and, at class level, a lock and the monitor thread.

A bar is saved as its attributes less the wrapper and the printer, plus the
stream under the wrapper (sys.stderr is saved as "the new process's stderr" by
files.py).  On restore the instance is made by tqdm's own __new__ (which
registers it among the live bars and starts the monitor thread afresh, as for
any new bar), its attributes are set back, the wrapper and the printer made
again, and its clock shifted so that the elapsed time goes on from where it was
(the time spent suspended is not counted).  The bar continues from its count.
"""
import sys
import time

_MODULE = "tqdm.std"
_NOT_SAVED = ("fp", "sp")


def _rb_bar(cls):
    return cls.__new__(cls)


def _set_bar(bar, saved):
    from tqdm.utils import DisableOnWriteError
    state, stream, saved_at = saved
    bar.__dict__.update(state)
    shift = time.time() - saved_at
    for name in ("start_t", "last_print_t"):
        if isinstance(state.get(name), float):
            setattr(bar, name, state[name] + shift)
    if stream is not None:
        bar.fp = DisableOnWriteError(stream, tqdm_instance=bar)
        bar.sp = bar.status_printer(bar.fp)


def reduce_bar(bar):
    state = {k: v for k, v in vars(bar).items() if k not in _NOT_SAVED}
    stream = None
    fp = vars(bar).get("fp")
    if fp is not None:
        try:
            stream = object.__getattribute__(fp, "_wrapped")
        except AttributeError:
            stream = fp
    return (_rb_bar, (type(bar),), (state, stream, time.time()), None, None, _set_bar)


def subclass_reducers():
    std = sys.modules.get(_MODULE)
    if std is None:
        return {}
    return {std.tqdm: reduce_bar}
