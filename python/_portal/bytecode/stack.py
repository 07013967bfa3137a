"""Static stack depths, and what each stack slot holds, before each instruction.

A CFG walk with the version's stack effects, exception edges included: a handler
starts at its table entry's depth, +1 for lasti if pushed, +1 for the exception.
"""
from __future__ import annotations

import functools
import types
from typing import Dict, List, Optional, Tuple

from _portal.bytecode.decode import Info, info as _info
from _portal.bytecode.model import CodeMapError, Instr
from _portal.bytecode.tables import T


@functools.lru_cache(maxsize=8192)
def effect(op: int, arg: Optional[int], jumped: bool) -> int:
    return T.stack_effect(op, arg, jumped)


def depths(info: Info) -> List[Optional[int]]:
    """Depth before each instruction (by index); None where unreachable."""
    if info.depths is None:
        info.depths = _compute_depths(info)
    return info.depths


def _compute_depths(info: Info) -> List[Optional[int]]:
    instrs = info.instrs
    depth: List[Optional[int]] = [None] * len(instrs)
    if not instrs:
        return depth
    depth[0] = 0
    work = [0]
    name = info.code.co_name

    def put(t: int, d: int, frm: int) -> None:
        old = depth[t]
        if old is None:
            depth[t] = d
            work.append(t)
        elif old != d:
            raise CodeMapError(
                f"{name}: stack depth {old} and {d} at offset "
                f"{instrs[t].offset} (from {instrs[frm].offset})")

    while work:
        k = work.pop()
        d = depth[k]
        ins = instrs[k]
        e = info.handler[k]
        if e is not None:
            if e.depth > d:
                raise CodeMapError(
                    f"{name}: handler depth {e.depth} above stack "
                    f"depth {d} at offset {ins.offset}")
            put(info.idx(e.target), e.depth + e.lasti + 1, k)
        for t, jumped in info.normal_succ(k):
            nd = d + effect(ins.opcode, ins.arg, jumped)
            if nd < 0:
                raise CodeMapError(f"{name}: negative stack depth "
                                   f"after offset {ins.offset}")
            put(t, nd, k)
    return depth


def kinds(info: Info) -> List[Optional[Tuple[str, ...]]]:
    """Kinds of the stack slots before each instruction (by index), bottom first."""
    if info.kinds is None:
        info.kinds = _compute_kinds(info)
    return info.kinds


def _compute_kinds(info: Info) -> List[Optional[Tuple[str, ...]]]:
    instrs = info.instrs
    state: List[Optional[Tuple[str, ...]]] = [None] * len(instrs)
    if not instrs:
        return state
    state[0] = ()
    work = [0]
    queued = {0}

    def put(t: int, st: Tuple[str, ...]) -> None:
        old = state[t]
        if old is None:
            new = st
        else:
            if len(old) != len(st):
                raise CodeMapError(f"{info.code.co_name}: stack height "
                                   f"mismatch at {instrs[t].offset}")
            new = tuple(a if a == b else "unknown" for a, b in zip(old, st))
            if new == old:
                return
        state[t] = new
        if t not in queued:
            queued.add(t)
            work.append(t)

    while work:
        k = work.pop()
        queued.discard(k)
        st = state[k]
        ins = instrs[k]
        e = info.handler[k]
        if e is not None:
            put(info.idx(e.target),
                st[:e.depth] + (("lasti",) if e.lasti else ()) + ("exception",))
        for t, jumped in info.normal_succ(k):
            put(t, _kind_step(ins, st, jumped))
    return state


def static_stack_depths(code: types.CodeType) -> Dict[int, int]:
    """{offset: stack depth before the instruction} for every reachable instruction.

    Keys are instruction offsets; an instruction with an EXTENDED_ARG prefix is
    listed under both the prefix's offset and the opcode's. Exception handlers
    start at the depth of their table entry, +1 for lasti if pushed, +1 for the
    exception. Unreachable instructions are absent.
    """
    info = _info(code)
    out: Dict[int, int] = {}
    for ins, d in zip(info.instrs, depths(info)):
        if d is not None:
            out[ins.offset] = d
            out[ins.op_offset] = d
    return out


# What was pushed, as far as it matters to resuming:
#   'iter'      iterator of a for-loop (GET_ITER)
#   'aiter'     async iterator (GET_AITER)
#   'exit'      bound __exit__ / __aexit__ of a with statement
#   'exc'       exception state saved by PUSH_EXC_INFO (restored by POP_EXCEPT)
#   'exception' exception being handled (pushed on entry to a handler)
#   'lasti'     offset of the raising instruction (pushed on handler entry)
#   'unknown'   anything else (operands, results, or differing on merging paths)
def stack_kinds(code: types.CodeType) -> Dict[int, Tuple[str, ...]]:
    """{offset: kinds of the stack slots before the instruction, bottom first}."""
    info = _info(code)
    out = {}
    for ins, st in zip(info.instrs, kinds(info)):
        if st is not None:
            out[ins.offset] = st
            out[ins.op_offset] = st
    return out


def pops(ins: Instr, jumped: bool) -> int:
    """How many stack items the instruction consumes (or replaces)."""
    name, arg = ins.opname, ins.arg
    p = T.FIXED_POPS.get(name)
    if p is not None:
        return p
    p = T.pops(name, arg, jumped)
    if p is not None:
        return p
    return max(0, -effect(ins.opcode, arg, jumped))


_COPY = T.OPMAP["COPY"]
_SWAP = T.OPMAP["SWAP"]
_PUSH_EXC_INFO = T.OPMAP["PUSH_EXC_INFO"]


@functools.lru_cache(maxsize=8192)
def _transfer(op: int, arg: Optional[int], jumped: bool) -> Tuple[int, Tuple[str, ...]]:
    """(items popped, kinds pushed) for an instruction other than COPY, SWAP and
    PUSH_EXC_INFO."""
    name = T.OPNAME[op]
    ins = Instr(0, 0, op, name, arg, 0, None)
    popped = pops(ins, jumped)
    pushes = popped + effect(op, arg, jumped)
    if pushes < 0:
        raise CodeMapError(f"{name}: pops {popped}, pushes {pushes}")
    pushed = T.PUSH_KINDS.get(name)
    if pushed is None or len(pushed) != pushes:
        pushed = ("unknown",) * pushes
    return popped, pushed


def _kind_step(ins: Instr, st: Tuple[str, ...], jumped: bool) -> Tuple[str, ...]:
    op = ins.opcode
    if op == _COPY:
        return st + (st[-ins.arg],)
    if op == _SWAP:
        lst = list(st)
        lst[-1], lst[-ins.arg] = lst[-ins.arg], lst[-1]
        return tuple(lst)
    if op == _PUSH_EXC_INFO:
        return st[:-1] + ("exc", st[-1])
    popped, pushed = _transfer(op, ins.arg, jumped)
    if popped > len(st):
        raise CodeMapError(f"{ins.opname} at {ins.offset}: pops {popped} "
                           f"from a stack of {len(st)}")
    return (st[:len(st) - popped] if popped else st) + pushed


def for_iter_depth(code: types.CodeType, lasti: int) -> Optional[int]:
    """Stack depth at the FOR_ITER that `lasti` is on (the iterator being the
    top slot), or None when `lasti` is not on a FOR_ITER: a frame driving a
    generator from a for-loop is suspended there."""
    info = _info(code)
    if lasti % 2:
        raise ValueError(f"offset {lasti} is odd")
    k = info.owner(lasti)
    if info.instrs[k].opname != "FOR_ITER":
        return None
    return depths(info)[k]
