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

Rolled back: a marked loop (iteration.py) notes, at each iteration's start, the
count of every live bar (`n`, `last_print_n`, the postfix; tqdm keeps the live
bars in the class's `_instances`: a few hundred nanoseconds for a bar or two).
When that loop is the resume point, a bar is saved with those, so a
`bar.update(...)` or `set_postfix` of the failed iteration is not counted twice
when it runs again.  What the bar already printed on the terminal stays printed.
`for batch in tqdm(loader)` needs nothing of this: its count is a local of the
bar's generator, which is saved at its `yield`, before the count of that item.
"""
import sys
import time

_MODULE = "tqdm.std"
_NOT_SAVED = ("fp", "sp")
# What a bar's update() and set_postfix() change, noted at each iteration's start.
_COUNTED = ("n", "last_print_n", "postfix")


def note():
    """[(weak reference to a live bar, {attribute: value at the iteration's start})]."""
    std = sys.modules.get(_MODULE)
    if std is None:
        return ()
    live = getattr(std.tqdm, "_instances", None)
    if not live:
        return ()
    import weakref
    noted = []
    for bar in [*live]:
        fields = vars(bar)
        noted.append((weakref.ref(bar), {k: fields[k] for k in _COUNTED if k in fields}))
    return noted


def _at_start(bar, marks):
    """The counts the bar had when the iteration rolled back to (its `marks`, or
    None) started, or {}."""
    for ref, counted in (marks or {}).get("bars", ()):
        if ref() is bar:
            return counted
    return {}


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


def reduce_bar(bar, marks):
    state = {k: v for k, v in vars(bar).items() if k not in _NOT_SAVED}
    state.update(_at_start(bar, marks))
    stream = None
    fp = vars(bar).get("fp")
    if fp is not None:
        try:
            stream = object.__getattribute__(fp, "_wrapped")
        except AttributeError:
            stream = fp
    return (_rb_bar, (type(bar),), (state, stream, time.time()), None, None, _set_bar)


def subclass_reducers(context):
    std = sys.modules.get(_MODULE)
    if std is None:
        return {}
    return {std.tqdm: lambda bar: reduce_bar(bar, context.marks)}
