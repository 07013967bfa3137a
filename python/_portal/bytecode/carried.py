"""Variables the failed iteration changed before the error, that its rerun reads.

A resume runs the failed iteration again from the start of the loop's body, with
the loop frame's variables as the capture found them, at the error.  A variable
the iteration rebound before the error (`step += 1`, `total = total + x` at the
top of the body) and that the rerun reads before it rebinds it starts from the
changed value: `step` counts the failed iteration twice.  This module finds such
variables from the bytecode, so that the capture can say so (irreversible.py's
"will differ" text; `oom.exact=true` declines such a point), never silently:

* the instructions the failed iteration may have run before the error: those on a
  path from the body's start to the instruction that raised (the frame's
  tb_lasti) that stays in this iteration (never through the for loop's FOR_ITER,
  a while loop's condition, or the loop's own handler);
* of these, the ones that store a plain variable: a fast local (function frames)
  or a name (module level, class bodies: STORE_NAME, STORE_GLOBAL);
* kept: a variable read on some path from the body's start before a store of it
  (it is live at the body's start: the rerun or the code after the loop reads
  the value the failed iteration left).

Cells (a closure's variables) and attributes or items of objects (`self.step +=
1`, `stats["n"] += 1`) are not seen: see docs/fidelity.md.
"""
from __future__ import annotations

import types
from typing import Callable, List, Optional, Set, Tuple

from _portal.bytecode.decode import CODE_UNIT, info as _info
from _portal.bytecode.liveness import slot_names
from _portal.bytecode.model import LoopSite
from _portal.bytecode.resume_points import in_body
from _portal.bytecode.tables import T

_OP = T.OPMAP
# Name stores and reads at module level and in class bodies (arguments index co_names).
_NAME_STORES = frozenset(_OP[n] for n in ("STORE_NAME", "STORE_GLOBAL", "DELETE_NAME", "DELETE_GLOBAL"))
_NAME_LOADS = frozenset(_OP[n] for n in ("LOAD_NAME",) if n in _OP)
_LOAD_GLOBAL = _OP["LOAD_GLOBAL"]
_FOR_ITER = _OP["FOR_ITER"]


def _successors(info, k: int) -> List[int]:
    out = [j for j, _ in info.normal_succ(k)]
    e = info.handler[k]
    if e is not None:
        out.append(info.idx(e.target))
    return out


def _name_effects(info, code: types.CodeType) -> Callable[[int], Tuple[Tuple[str, ...], Tuple[str, ...]]]:
    """k -> (names read, names written) by instruction k: fast locals by their
    slot names, module-level names by co_names."""
    names = slot_names(code)
    cells = set(code.co_cellvars) | set(code.co_freevars)

    def effects(k: int):
        ins = info.instrs[k]
        uses, defs = T.fast_uses_defs(ins.opcode, ins.arg)
        read = tuple(names[i] for i in uses if i < len(names) and names[i] not in cells)
        written = tuple(names[i] for i in defs if i < len(names) and names[i] not in cells)
        if ins.opcode in _NAME_STORES:
            written += (code.co_names[ins.arg],)
        elif ins.opcode in _NAME_LOADS:
            read += (code.co_names[ins.arg],)
        elif ins.opcode == _LOAD_GLOBAL:   # `global n; n += 1` in a function too
            read += (code.co_names[T.global_name(ins.arg)],)
        return read, written
    return effects


def _iteration_region(info, code, site: LoopSite) -> Set[int]:
    """Instructions reachable from the body's start without leaving the iteration."""
    start = info.idx(site.body_start)
    barrier = {info.idx(site.handler)}
    if site.for_iter is not None:
        barrier.add(info.idx(site.for_iter))
    seen, todo = set(), [start]
    while todo:
        k = todo.pop()
        if k in seen or k in barrier:
            continue
        if site.body_span is not None and not in_body(code, site, info.instrs[k].offset):
            continue   # a while loop's condition or else clause: not this iteration
        seen.add(k)
        todo.extend(_successors(info, k))
    return seen


def changed_before(code: types.CodeType, site: LoopSite, error_offset: int) -> List[Tuple[str, Optional[int]]]:
    """[(variable, line of a store of it)] that the failed iteration may have
    rebound before the instruction at `error_offset` raised, and that are live at
    the body's start; in the order of their first store."""
    info = _info(code)
    try:
        error_k = info.owner(error_offset - error_offset % CODE_UNIT)
    except (ValueError, IndexError):
        return []
    region = _iteration_region(info, code, site)
    if error_k not in region:
        return []
    # backwards from the error, within the iteration
    preds = {k: [] for k in region}
    for k in region:
        for j in _successors(info, k):
            if j in region:
                preds[j].append(k)
    before, todo = set(), [error_k]
    while todo:
        k = todo.pop()
        if k in before:
            continue
        before.add(k)
        todo.extend(preds[k])
    before.discard(error_k)        # the raising instruction did not complete
    effects = _name_effects(info, code)
    stored = {}
    for k in sorted(before):
        for name in effects(k)[1]:
            stored.setdefault(name, info.line_of(info.instrs[k].offset))
    return [(name, line) for name, line in stored.items()
            if _read_before_store(info, effects, info.idx(site.body_start), info.idx(site.handler), name)]


def _read_before_store(info, effects, start: int, handler: int, name: str) -> bool:
    """Is `name` read on some path from instruction `start` before a store of it
    (the whole code object: the loop's next iterations and what follows it)?  Not
    through the loop's own handler: an error it takes ends the iteration in a
    rescue (or python's own failure), which is not a path of the program."""
    seen, todo = {handler}, [start]
    while todo:
        k = todo.pop()
        if k in seen:
            continue
        seen.add(k)
        read, written = effects(k)
        if name in read:
            return True
        if name in written:
            continue
        todo.extend(_successors(info, k))
    return False
