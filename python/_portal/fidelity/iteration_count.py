"""Counting the iterations of loops whose iterator keeps no count of its own.

The suspension report names the iteration that runs again, as the program counts
it (suspend.py: `iteration 13 (0-based)`, `batch 4 (0-based) of epoch 2`).  Two
common iterators say nothing of it by themselves:

- `tqdm(loader)`: the loop iterates tqdm's `__iter__`, a generator of library
  code whose own `for obj in iterable: yield obj` gives every item of the
  iterable it wraps, one for one: suspended at its `yield`, its frame's stack
  holds the iterable's iterator, which is counted in its place (a DataLoader's
  iterator: its batches);
- `enumerate(generator)`: the generator keeps no count, the enumerate does (the
  index it gives next); it is the iteration's when the loop's own code calls the
  builtin `enumerate` with the iterable alone, which counts from 0
  (bytecode/range_loops.py reads that call as it reads `range(n)`).
"""
import types


def wrapped_iterator(it):
    """The iterator a suspended tqdm generator iterates for its bar, or None."""
    if type(it) is not types.GeneratorType:
        return None
    try:
        from _portal import _frames
        from _portal.checkpoint.program import EMPTY
        state, _, nlocalsplus, stacktop, function = _frames.gen_info(it)
        if not isinstance(function, types.FunctionType) or function.__name__ != "__iter__":
            return None
        if (getattr(function, "__module__", None) or "").split(".")[0] != "tqdm":
            return None
        if it.gi_frame is None or it.gi_running or not it.gi_suspended:
            return None
        stack = _frames.gen_slots(it, nlocalsplus, stacktop, EMPTY)
    except Exception:  # noqa: BLE001 - no count, never a wrong one
        return None
    # its `for obj in iterable` loop's iterator, the one item of its stack at the yield
    items = [item for item in stack if item is not EMPTY]
    return items[-1] if len(items) == 1 else None


def enumerate_index(it, frame, for_iter):
    """The 0-based index of the item an `enumerate(ITERABLE)` of the loop whose
    FOR_ITER is at `for_iter` in `frame` gave last, or None."""
    if type(it) is not enumerate or frame is None or for_iter is None:
        return None
    from _portal.bytecode.range_loops import range_start
    found = range_start(frame.f_code, for_iter, callee="enumerate")
    if found is None:
        return None
    scope, _ = found
    bound = frame.f_globals.get("enumerate", frame.f_builtins.get("enumerate"))
    if scope == "name":
        bound = frame.f_locals.get("enumerate", bound)
    if bound is not enumerate:
        return None
    try:
        given = it.__reduce__()[1][1]
    except Exception:  # noqa: BLE001
        return None
    return given - 1 if isinstance(given, int) and given > 0 else None

