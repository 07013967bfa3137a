"""Where a for loop's iterator came from, when the code says it plainly.

Portal names the iteration a suspended loop is in ("iteration 4 (0-based)") from
its iterator's ``__reduce__``, which gives how many items a list, tuple or str
iterator has given.  A range iterator did in 3.11; from 3.12 on it keeps only the
range still to come (``range(7, 9)``), not where it started.  Where the loop's
iterable is written as a call of the name ``range`` whose start and step are in
the code (``range(n)``: 0 and 1; ``range(2, n)``; ``range(0, n, 3)``), the count
follows from what is left: (next - start) // step items given.

`range_origin(code, offset, slot)` finds the for loop whose iterator is stack slot
`slot` before the instruction at `offset` (the innermost enclosing FOR_ITER with
its iterator in that slot) and, when its iterable is such a call in straight-line
code, returns ``(start, step, scope)``; ``scope`` says how the name ``range`` was
looked up ('global': globals then builtins; 'name': LOAD_NAME, module level), so
that the caller can check it is the builtin.  Version-neutral: the call protocol
and the name loads are read through the version's table (resume_points.how_made).
"""
from __future__ import annotations

import types
from typing import Optional, Tuple

from _portal.bytecode import stack
from _portal.bytecode.decode import info as _info
from _portal.bytecode.resume_points import CALLABLE_SLOTS, how_made
from _portal.bytecode.tables import T

_RANGE = "range"
_DEFAULT_START = 0
_DEFAULT_STEP = 1
# range(stop), range(start, stop), range(start, stop, step)
_STOP_ONLY, _START_STOP, _START_STOP_STEP = 1, 2, 3


def range_origin(code: types.CodeType, offset: int, slot: int) -> Optional[Tuple[int, int, str]]:
    """(start, step, scope) of the `range(...)` call whose iterator is stack slot
    `slot` before the instruction at `offset`; None when that slot is not a for
    loop's iterator made so, or the start or step is not a constant of the code."""
    info = _info(code)
    try:
        at = info.owner(offset)
    except ValueError:
        return None
    fi = _enclosing_for_iter(info, at, slot)
    if fi is None or fi == 0 or info.instrs[fi - 1].opname != "GET_ITER":
        return None
    get_iter = fi - 1
    made = how_made(info, get_iter)      # straight-line code, `NAME(...)` (else None)
    if made is None or made[0] != "call" or made[2] != (_RANGE,):
        return None
    call = info.instrs[get_iter - 1]
    if call.opname != "CALL":
        return None
    nargs = call.arg
    if nargs == _STOP_ONLY:
        return _DEFAULT_START, _DEFAULT_STEP, made[1]
    if nargs not in (_START_STOP, _START_STOP_STEP):
        return None
    depths = stack.depths(info)
    base = depths[get_iter] - 1                  # below the range object
    first_arg = base + CALLABLE_SLOTS
    first = get_iter - len(T.CALL_SEQUENCE)      # 3.11: the PRECALL; 3.13: the CALL
    # the start: the one instruction that pushes the first argument, right after
    # the callable's loads (the code is straight from them to the call)
    j = get_iter - 1
    while j > 0 and depths[j - 1] is not None and depths[j - 1] >= first_arg:
        j -= 1
    if depths[j] != first_arg or j + 1 >= first or depths[j + 1] != first_arg + 1:
        return None
    start = _int_const(info, j)
    if start is None:
        return None
    if nargs == _START_STOP:
        return start, _DEFAULT_STEP, made[1]
    # the step: the last argument, right before the call instructions
    s = first - 1
    step = _int_const(info, s) if depths[s] == first_arg + nargs - 1 else None
    if not step:
        return None
    return start, step, made[1]


def _int_const(info, k: int) -> Optional[int]:
    ins = info.instrs[k]
    if ins.opname != "LOAD_CONST":
        return None
    value = info.code.co_consts[ins.arg]
    return value if type(value) is int else None


def _enclosing_for_iter(info, at: int, slot: int) -> Optional[int]:
    """Index of the innermost FOR_ITER whose loop holds instruction `at` (between
    the FOR_ITER and where it exits to) and whose iterator is stack slot `slot`."""
    depths = stack.depths(info)
    offset = info.instrs[at].offset
    best = None
    for k, ins in enumerate(info.instrs):
        if ins.opname != "FOR_ITER" or ins.target is None or depths[k] != slot + 1:
            continue
        if ins.offset < offset < ins.target and (best is None or k > best):
            best = k
    return best
