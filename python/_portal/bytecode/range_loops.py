"""Where a `for x in range(...)` loop's range began, when its bytecode says so.

A suspension report names the iteration that runs again, counted as the program
counts it (suspend.py).  A range iterator of CPython 3.11 tells how many items it
gave (its `__reduce__` state); from 3.12 on it keeps only what is left,
`range(next, stop, step)`, and the count is `(next - start) // step` for the
range's first `start`, which the iterator no longer holds.  The loop's own code
holds it when the iterable is a plain call of the name `range` whose start is a
literal: `range(n)` (start 0), `range(1, n)`, `range(2, n, 2)`.

`range_start(code, for_iter)` reads that call from the straight-line code before
the loop's GET_ITER and gives (scope, start): scope 'global' (LOAD_GLOBAL:
globals, then builtins) or 'name' (LOAD_NAME: module level) is where the caller
must check, in the running frame, that the name `range` is the builtin.  None
when the code is any other shape (a range made elsewhere, a start computed at
run time, a local called range): the report then names no iteration rather than
a guessed one.
"""
from __future__ import annotations

import types
from typing import Optional, Tuple

from _portal.bytecode import stack
from _portal.bytecode.decode import info as _info
from _portal.bytecode.tables import T

RANGE = "range"
# range(stop) starts at 0; with two or three arguments the first is the start.
_DEFAULT_START = 0
_MAX_RANGE_ARGS = 3
# A call's two slots below its arguments (the callable and its NULL or self).
_CALLABLE_SLOTS = 2


def range_start(code: types.CodeType, for_iter: int, callee: str = RANGE) -> Optional[Tuple[str, int]]:
    """(scope, start) of the `range(...)` call the loop whose FOR_ITER is at
    offset `for_iter` iterates, or None when the code does not say plainly.
    callee="enumerate": (scope, 0) for a plain `enumerate(ITERABLE)` (one
    argument: it counts from 0), None for any other call."""
    info = _info(code)
    instrs = info.instrs
    depths = stack.depths(info)
    try:
        k = info.idx(for_iter)
    except ValueError:
        return None
    get_iter = k - 1
    if get_iter < 0 or instrs[get_iter].opname != "GET_ITER":
        return None
    call = get_iter - 1
    first = get_iter - len(T.CALL_SEQUENCE)      # 3.11: the PRECALL; 3.13: the CALL
    if first < 0 or instrs[call].opname != "CALL":
        return None
    nargs = instrs[call].arg
    if callee != RANGE and nargs != 1:
        return None
    if not 1 <= nargs <= _MAX_RANGE_ARGS or any(
            instrs[i].opname != name or instrs[i].arg != nargs
            for i, name in zip(range(first, get_iter), T.CALL_SEQUENCE)):
        return None
    if depths[get_iter] is None or depths[first] is None:
        return None
    base = depths[get_iter] - 1                  # below the range object
    if depths[first] != base + _CALLABLE_SLOTS + nargs:
        return None
    # The callee's instructions: the first one back from the call that starts at
    # `base`, in straight-line code from there to the loop.
    j = first - 1
    while j >= 0 and depths[j] is not None and depths[j] > base:
        j -= 1
    if j < 0 or depths[j] != base:
        return None
    targets = info.jump_targets()
    for i in range(j, k):
        if instrs[i].target is not None or instrs[i].opcode in T.TERMINAL or \
                (i > j and instrs[i].offset in targets):
            return None
    i, scope = _callee(info, j, first, callee)
    if scope is None:
        return None
    # The arguments, from `i` to the call: nothing they do may reach below the
    # callable's slots, and a start given must be a literal int alone in its slot.
    if nargs == 1:
        start = _DEFAULT_START
        if not _above(info, depths, i, first, base + _CALLABLE_SLOTS):
            return None
    else:
        load = instrs[i]
        is_constant, start = T.constant(code, load)
        if not is_constant or depths[i] != base + _CALLABLE_SLOTS:
            return None
        if type(start) is not int:
            return None
        if not _above(info, depths, i + 1, first, base + _CALLABLE_SLOTS + 1):
            return None
    return scope, start


def _callee(info, j: int, first: int, callee: str = RANGE):
    """(index after the callee's loads, scope) when instructions j.. push the name
    `range` (or `callee`) and a NULL (3.11: PUSH_NULL, LOAD_NAME or LOAD_GLOBAL with its low bit;
    3.13: LOAD_NAME, PUSH_NULL or LOAD_GLOBAL with its low bit); (j, None) else."""
    instrs, names = info.instrs, info.code.co_names
    i, null = j, False
    if i < first and instrs[i].opname == "PUSH_NULL":
        null, i = True, i + 1
    if i >= first:
        return j, None
    load = instrs[i]
    if load.opname == "LOAD_GLOBAL":
        if names[T.global_name(load.arg)] != callee or not T.global_pushes_null(load.arg) or null:
            return j, None
        return i + 1, "global"
    if load.opname != "LOAD_NAME" or names[load.arg] != callee:
        return j, None
    i += 1
    if not null:
        if i >= first or instrs[i].opname != "PUSH_NULL":
            return j, None
        i += 1
    return i, "name"


def _above(info, depths, start: int, end: int, floor: int) -> bool:
    """Whether instructions start..end-1 neither pop nor replace any stack slot
    below `floor`: what they compute stays above it."""
    for x in range(start, end):
        d = depths[x]
        if d is None or d - stack.pops(info.instrs[x], False) < floor:
            return False
    return True


def enclosing_for_iter(code: types.CodeType, offset: int, slot: int) -> Optional[int]:
    """The offset of the FOR_ITER of the innermost for loop of `code` around
    `offset` whose iterator is stack slot `slot` (an outer loop's, for a report's
    `of epoch N`), or None."""
    info = _info(code)
    depths = stack.depths(info)
    found = None
    for k, ins in enumerate(info.instrs):
        if (ins.opname == "FOR_ITER" and depths[k] == slot + 1 and ins.target is not None
                and ins.offset <= offset < ins.target):
            found = ins.offset
    return found
