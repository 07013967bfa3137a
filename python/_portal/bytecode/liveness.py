"""Liveness of fast locals: which can still be read from an offset.

A backward fixpoint over basic blocks with exception edges; the version's
tables say which instructions read and write which slots (3.13 reads two
locals in one LOAD_FAST_LOAD_FAST, and so on).  Sound: a live variable is never
reported dead.
"""
from __future__ import annotations

import types
from typing import List, Optional, Set, Tuple

from _portal.bytecode import resume_points
from _portal.bytecode.decode import Info, info as _info
from _portal.bytecode.model import Instr
from _portal.bytecode.slots import slot_names
from _portal.bytecode.tables import T

# Names whose use may read a frame's locals behind the bytecode's back. Their
# presence anywhere in co_names (globals, attributes, methods, imports) makes
# every local live. Reads from other frames (a callee doing
# sys._getframe(1).f_locals) cannot be seen here and are not accounted for.
# Builtins that read the calling frame's locals: they count only when the code
# loads them by name (`model.eval()` is an attribute, not the builtin).
_INTROSPECTION = frozenset(("locals", "vars", "dir", "eval", "exec", "breakpoint"))
# Attributes that reach a frame (sys._getframe, inspect.currentframe, f_locals,
# pdb.set_trace): any mention counts.
_INTROSPECTION_ATTRS = frozenset(("_getframe", "currentframe", "f_locals", "set_trace"))
# Loads of a name from globals/builtins by co_names index: LOAD_NAME and
# LOAD_FROM_DICT_OR_GLOBALS (3.12+, class bodies) take the index as it is.
_NAME_LOADS = frozenset(("LOAD_NAME", "LOAD_FROM_DICT_OR_GLOBALS"))


def _may_introspect(info: Info) -> bool:
    """Whether the code may read its own locals by introspection."""
    code = info.code
    names = set(code.co_names)
    if names & _INTROSPECTION_ATTRS:
        return True
    wanted = names & _INTROSPECTION
    if not wanted:
        return False
    for ins in info.instrs:
        if ins.opname == "LOAD_GLOBAL":
            name = code.co_names[T.global_name(ins.arg)]
        elif ins.opname in _NAME_LOADS:
            name = code.co_names[ins.arg]
        else:
            continue
        if name in wanted:
            return True
    return False


class Live:
    """Backward liveness over basic blocks.  `cut`: indices of conditional jumps
    whose jumped edge cannot be taken (the "__exit__ returned true" jump of a with
    statement whose manager never swallows an error)."""

    def __init__(self, info: Info, cut: frozenset = frozenset()):
        code = info.code
        self.info = info
        self.cut = cut
        names = slot_names(code)
        self.names = names
        cells = set(code.co_cellvars) | set(code.co_freevars)
        # bit i <-> localsplus index i; only plain fast locals are tracked
        self.tracked = 0
        for i, nm in enumerate(names):
            if nm not in cells and i < code.co_nlocals:
                self.tracked |= 1 << i
        self.always = 0
        self.everything = _may_introspect(info)
        if "super" in code.co_names and code.co_nlocals:
            # zero-argument super() reads localsplus[0] from the frame
            self.always |= 1 << 0
        self._masks = {}
        self._solve()

    def _solve(self) -> None:
        info = self.info
        instrs = info.instrs
        n = len(instrs)
        targets = info.jump_targets()
        terminal = T.TERMINAL
        leaders = {0}
        for k, ins in enumerate(instrs):
            if ins.target is not None or ins.opcode in terminal:
                leaders.add(k + 1)
            if ins.offset in targets:
                leaders.add(k)
            if k and info.handler[k] != info.handler[k - 1]:
                leaders.add(k)
        for e in info.table:
            leaders.add(info.idx(e.target))
        starts = sorted(x for x in leaders if x < n)
        bounds = list(zip(starts, starts[1:] + [n]))
        block_of = [0] * n
        for b, (s, t) in enumerate(bounds):
            for k in range(s, t):
                block_of[k] = b
        nb = len(bounds)
        gen = [0] * nb
        kill = [0] * nb
        succ: List[List[int]] = [[] for _ in range(nb)]
        exc: List[Optional[int]] = [None] * nb
        for b, (s, t) in enumerate(bounds):
            g = kl = 0
            for k in range(t - 1, s - 1, -1):
                u, d = self.use_def(instrs[k])
                g = (g & ~d) | u
                kl |= d
            gen[b], kill[b] = g, kl
            e = info.handler[s]
            if e is not None:
                exc[b] = block_of[info.idx(e.target)]
            last = t - 1
            succ[b] = [block_of[t2] for t2, jumped in info.normal_succ(last)
                       if not (jumped and last in self.cut)]
        live_in = [0] * nb
        preds: List[List[int]] = [[] for _ in range(nb)]
        for b in range(nb):
            for s2 in succ[b]:
                preds[s2].append(b)
            if exc[b] is not None:
                preds[exc[b]].append(b)
        work = list(range(nb))
        inq = [True] * nb
        while work:
            b = work.pop()
            inq[b] = False
            out = 0
            for s2 in succ[b]:
                out |= live_in[s2]
            li = gen[b] | (out & ~kill[b])
            if exc[b] is not None:
                li |= live_in[exc[b]]
            if li != live_in[b]:
                live_in[b] = li
                for p in preds[b]:
                    if not inq[p]:
                        inq[p] = True
                        work.append(p)
        self.bounds, self.block_of, self.succ, self.exc = bounds, block_of, succ, exc
        self.live_in = live_in

    def use_def(self, ins: Instr) -> Tuple[int, int]:
        """(bits read, bits written) of tracked locals by one instruction."""
        key = (ins.opcode, ins.arg)
        got = self._masks.get(key)
        if got is None:
            uses, defs = T.fast_uses_defs(ins.opcode, ins.arg)
            u = d = 0
            for i in uses:
                u |= 1 << i
            for i in defs:
                d |= 1 << i
            got = self._masks[key] = (u & self.tracked, d & self.tracked)
        return got

    def live_at(self, k: int) -> int:
        b = self.block_of[k]
        s, t = self.bounds[b]
        live = 0
        for s2 in self.succ[b]:
            live |= self.live_in[s2]
        e = self.live_in[self.exc[b]] if self.exc[b] is not None else 0
        for j in range(t - 1, k - 1, -1):
            u, d = self.use_def(self.info.instrs[j])
            live = (live & ~d) | u | e
        return live


def live(info: Info, never_suppress=()) -> Live:
    cut = _cut_edges(info, never_suppress)
    lv = info.live.get(cut)
    if lv is None:
        lv = info.live[cut] = Live(info, cut)
    return lv


def _cut_edges(info: Info, never_suppress) -> frozenset:
    """The suppress jumps of the with statements (BEFORE_WITH offsets) whose
    __exit__ never returns true: those jumps are never taken."""
    if not never_suppress:
        return frozenset()
    wanted = set(never_suppress)
    return frozenset(info.idx(w.suppress_jump) for w in resume_points.withs(info)
                     if w.before_with in wanted)


def live_locals_at(code: types.CodeType, offset: int, never_suppress=()) -> Set[str]:
    """Plain fast locals that may be read (or deleted) from `offset` on.

    Cell and free variables are not plain locals and are always to be kept.
    never_suppress: as for dead_locals_at.
    """
    info = _info(code)
    k = info.idx(offset)
    lv = live(info, never_suppress)
    names = [nm for i, nm in enumerate(lv.names) if lv.tracked >> i & 1]
    if lv.everything:
        return set(names)
    bits = lv.live_at(k) | lv.always
    return {nm for i, nm in enumerate(lv.names) if lv.tracked >> i & 1 and bits >> i & 1}


def dead_locals_at(code: types.CodeType, offset: int, never_suppress=()) -> Set[str]:
    """Plain fast locals whose current value can never be read from `offset` on.

    On every path from `offset` (exception edges included) such a variable is
    written before it is read or deleted. Cell and free variables are never
    reported; nothing is reported if the code may read its locals by
    introspection (locals(), vars(), dir(), eval, exec, sys._getframe, ...).

    never_suppress: BEFORE_WITH offsets (WithSite.before_with) of with statements
    whose `__exit__` is known never to return true; for those the handler's path
    "the error was swallowed, go on after the block" does not exist.  Without
    it, `with m: loss = f()` keeps last iteration's `loss` alive: were `f()` to
    raise and `m.__exit__` to swallow the error, the code after the block would
    read it.
    """
    info = _info(code)
    k = info.idx(offset)
    lv = live(info, never_suppress)
    if lv.everything:
        return set()
    bits = lv.live_at(k) | lv.always
    return {nm for i, nm in enumerate(lv.names)
            if lv.tracked >> i & 1 and not bits >> i & 1}
