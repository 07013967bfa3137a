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

An inlined comprehension (3.12+, PEP 709: `[x * 2 for x in data]` runs in the
loop's own frame) binds its variable in a fast local of the frame, but saves the
outer value first (LOAD_FAST_AND_CLEAR x) and puts it back when it ends, normally
or by an exception (its cleanup handler): its stores of x, and the restores, change
nothing the rerun reads, and are not counted (_comprehension_stores).

Cells (a closure's variables) are not seen.  Attributes and items of objects
(`self.step += 1`, `stats["n"] += 1`) are stores.py's, on the same path
(path_before): see docs/fidelity.md.
"""
from __future__ import annotations

import types
from typing import Callable, List, Optional, Set, Tuple

from _portal.bytecode.decode import CODE_UNIT, info as _info
from _portal.bytecode.slots import slot_names
from _portal.bytecode.model import LoopSite
from _portal.bytecode.resume_points import in_body
from _portal.bytecode.tables import T

_OP = T.OPMAP
# Name stores and reads at module level and in class bodies (arguments index co_names).
_NAME_STORES = frozenset(_OP[n] for n in ("STORE_NAME", "STORE_GLOBAL", "DELETE_NAME", "DELETE_GLOBAL"))
_NAME_LOADS = frozenset(_OP[n] for n in ("LOAD_NAME",) if n in _OP)
_LOAD_GLOBAL = _OP["LOAD_GLOBAL"]
_FOR_ITER = _OP["FOR_ITER"]
# Inlined comprehensions (3.12+; None where comprehensions are functions of their own).
_SAVE_AND_CLEAR = _OP.get("LOAD_FAST_AND_CLEAR")
# What the compiler puts between the saves and the comprehension's protected range,
# and between that range's end (or its cleanup handler's start) and the restores.
_SAVE_PROLOGUE = frozenset(_OP[n] for n in ("SWAP", "LOAD_FAST_AND_CLEAR") if n in _OP)
_RESTORE_EPILOGUE = frozenset(_OP[n] for n in ("SWAP", "POP_TOP", "STORE_FAST", "END_FOR") if n in _OP)


def _successors(info, k: int) -> List[int]:
    out = [j for j, _ in info.normal_succ(k)]
    e = info.handler[k]
    if e is not None:
        out.append(info.idx(e.target))
    return out


def _comprehension_stores(info) -> Set[Tuple[int, int]]:
    """{(instruction index, slot)}: the stores of an inlined comprehension's
    variable that the comprehension itself undoes (see the module's docstring):
    inside the exception-table range that follows its LOAD_FAST_AND_CLEAR, and the
    restoring STORE_FAST after that range and in its cleanup handler.  Empty where
    the shape is not the compiler's (nothing is left out then: more found, never
    less)."""
    out: Set[Tuple[int, int]] = set()
    if _SAVE_AND_CLEAR is None:
        return out
    instrs, n = info.instrs, len(info.instrs)
    k = 0
    while k < n:
        if instrs[k].opcode != _SAVE_AND_CLEAR:
            k += 1
            continue
        first = k
        while k < n and instrs[k].opcode in _SAVE_PROLOGUE:
            k += 1
        saved = {ins.arg for ins in instrs[first:k] if ins.opcode == _SAVE_AND_CLEAR}
        entry = info.handler[k] if k < n else None
        if entry is None or instrs[k].op_offset != entry.start:
            continue        # not the compiler's shape: count every store
        inner = {j for j in range(k, n) if instrs[j].op_offset < entry.end}
        for start in (max(inner) + 1, info.idx(entry.target)):
            inner |= _restores(instrs, start, saved)
        out |= {(j, slot) for j in inner for slot in saved
                if slot in T.fast_uses_defs(instrs[j].opcode, instrs[j].arg)[1]}
    return out


def _restores(instrs, start: int, saved: Set[int]) -> Set[int]:
    """The instructions from `start` up to the last restoring STORE_FAST of a saved
    slot (only swaps, pops and stores between)."""
    left, out, j = set(saved), set(), start
    while left and j < len(instrs) and instrs[j].opcode in _RESTORE_EPILOGUE:
        out.add(j)
        left.discard(instrs[j].arg if instrs[j].opcode == _OP["STORE_FAST"] else None)
        j += 1
    return out if not left else set()


def _name_effects(info, code: types.CodeType) -> Callable[[int], Tuple[Tuple[str, ...], Tuple[str, ...]]]:
    """k -> (names read, names written) by instruction k: fast locals by their
    slot names, module-level names by co_names.  The stores an inlined
    comprehension undoes itself are not writes."""
    names = slot_names(code)
    cells = set(code.co_cellvars) | set(code.co_freevars)
    undone = _comprehension_stores(info)

    def effects(k: int):
        ins = info.instrs[k]
        uses, defs = T.fast_uses_defs(ins.opcode, ins.arg)
        read = tuple(names[i] for i in uses if i < len(names) and names[i] not in cells)
        written = tuple(names[i] for i in defs
                        if i < len(names) and names[i] not in cells and (k, i) not in undone)
        if ins.opcode in _NAME_STORES:
            written += (code.co_names[ins.arg],)
        elif ins.opcode in _NAME_LOADS:
            read += (code.co_names[ins.arg],)
        elif ins.opcode == _LOAD_GLOBAL:   # `global n; n += 1` in a function too
            read += (code.co_names[T.global_name(ins.arg)],)
        return read, written
    return effects


def _iteration_region(info, code, site: LoopSite) -> Set[int]:
    """Instructions reachable from the body's start without leaving the iteration.
    In a while loop, an instruction the compiler gave no source position (the
    entry of a handler of the body's own `try`: PUSH_EXC_INFO, its cleanup) is
    part of the body when reached from it: the condition and the else clause
    have positions, outside the body's span."""
    start = info.idx(site.body_start)
    barrier = {info.idx(site.handler)}
    if site.for_iter is not None:
        barrier.add(info.idx(site.for_iter))
    positions = info.positions() if site.body_span is not None else None
    seen, todo = set(), [start]
    while todo:
        k = todo.pop()
        if k in seen or k in barrier:
            continue
        if site.body_span is not None and not in_body(code, site, info.instrs[k].offset) \
                and positions[info.instrs[k].offset // CODE_UNIT][0] is not None:
            continue   # a while loop's condition or else clause: not this iteration
        seen.add(k)
        todo.extend(_successors(info, k))
    return seen


def path_before(code: types.CodeType, site: LoopSite, error_offset: int):
    """(info, {instruction index}): the instructions the failed iteration may have
    run before the one at `error_offset` raised (that one excluded), on a path
    from the body's start within the iteration; None when the error is not in
    the iteration's region."""
    info = _info(code)
    try:
        error_k = info.owner(error_offset - error_offset % CODE_UNIT)
    except (ValueError, IndexError):
        return None
    region = _iteration_region(info, code, site)
    if error_k not in region:
        return None
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
    return info, before


def changed_before(code: types.CodeType, site: LoopSite, error_offset: int) -> List[Tuple[str, Optional[int]]]:
    """[(variable, line of a store of it)] that the failed iteration may have
    rebound before the instruction at `error_offset` raised, and that are live at
    the body's start; in the order of their first store."""
    found = path_before(code, site, error_offset)
    if found is None:
        return []
    info, before = found
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
