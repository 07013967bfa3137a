"""Decoding: instructions (EXTENDED_ARG folded, caches skipped, jump targets),
the exception table, and the control-flow successors of each instruction.

Pure Python over the public view of a code object (`co_code` is the de-optimised
bytecode: specialised and instrumented instructions keep their offsets, so what is
computed here holds for the running, quickened code too).  All offsets are in
bytes, as `dis` and `frame.f_lasti` give them; an instruction is 2 bytes and is
followed by its inline CACHE entries (2 bytes each).  The numbers are the running
version's (tables.T).
"""
from __future__ import annotations

import bisect
import functools
import types
from typing import Dict, List, Optional, Tuple

from _portal.bytecode.model import CodeMapError, ExceptionEntry, Instr
from _portal.bytecode.tables import T

# The exception table's varints: 6 bits of value per byte, bit 6 "more follows"
# (bit 7 marks an entry's first byte), in 3.11 and 3.13 alike.
_VARINT_BITS = 6
_VARINT_VALUE = (1 << _VARINT_BITS) - 1
_VARINT_MORE = 1 << _VARINT_BITS
# A code unit (opcode + argument byte, or one CACHE entry) is this many bytes.
CODE_UNIT = 2


def _varint(data: bytes, i: int) -> Tuple[int, int]:
    b = data[i]
    val = b & _VARINT_VALUE
    i += 1
    while b & _VARINT_MORE:
        b = data[i]
        i += 1
        val = (val << _VARINT_BITS) | (b & _VARINT_VALUE)
    return val, i


def parse_exception_table(code: types.CodeType) -> List[ExceptionEntry]:
    """The entries of `code.co_exceptiontable`, offsets in bytes, `end` exclusive.

    Same result as `dis._parse_exception_table(code)` (tested on the stdlib).
    Entries do not overlap: an offset is covered by at most one (the innermost
    handler), as the interpreter's lookup assumes.
    """
    return list(exception_table(code))


@functools.lru_cache(maxsize=512)
def exception_table(code: types.CodeType) -> Tuple[ExceptionEntry, ...]:
    data = code.co_exceptiontable
    out = []
    i, n = 0, len(data)
    while i < n:
        start, i = _varint(data, i)
        length, i = _varint(data, i)
        target, i = _varint(data, i)
        dl, i = _varint(data, i)
        out.append(ExceptionEntry(start * CODE_UNIT, (start + length) * CODE_UNIT,
                                  target * CODE_UNIT, dl >> 1, bool(dl & 1)))
    return tuple(out)


def instructions(code: types.CodeType) -> List[Instr]:
    """The instructions of `code` in order, EXTENDED_ARG folded into the next."""
    return list(info(code).instrs)


def decode(raw: bytes) -> List[Instr]:
    """Instructions of the bytecode `raw` (a code object's co_code)."""
    opname, has_arg, caches = T.OPNAME, T.HAS_ARG, T.CACHES
    hasjrel, hasjabs, jump_target = T.HASJREL, T.HASJABS, T.jump_target
    extended = T.EXTENDED_ARG
    new = tuple.__new__
    instrs: List[Instr] = []
    append = instrs.append
    i, n = 0, len(raw)
    ext = 0
    start = None
    while i < n:
        op = raw[i]
        if start is None:
            start = i
        if op == extended:
            ext = (ext | raw[i + 1]) << 8
            i += CODE_UNIT
            continue
        arg = (ext | raw[i + 1]) if op in has_arg else None
        ext = 0
        end = i + CODE_UNIT * (1 + caches[op])
        target = None
        if op in hasjrel:
            target = jump_target(i, end, op, arg)
        elif op in hasjabs:
            target = CODE_UNIT * arg
        append(new(Instr, (start, i, op, opname[op], arg, end, target)))
        start = None
        i = end
    return instrs


class Info:
    """Per-code-object analyses.  Decoding and the CFG are made here; the other
    modules keep what they compute on it (stack.py: depths and kinds,
    liveness.py, resume_points.py), computed lazily and cached with it."""

    def __init__(self, code: types.CodeType):
        self.code = code
        instrs = decode(code.co_code)
        self.instrs: Tuple[Instr, ...] = tuple(instrs)
        self.size = len(code.co_code)
        self.starts = [ins.offset for ins in instrs]
        index: Dict[int, int] = {}
        for k, ins in enumerate(instrs):
            index[ins.offset] = k
            if ins.op_offset != ins.offset:
                index[ins.op_offset] = k
        self.index = index
        self.table = exception_table(code)
        # index -> covering exception entry (None if none)
        handler: List[Optional[ExceptionEntry]] = [None] * len(instrs)
        ninstr = len(instrs)
        for e in self.table:
            k = max(0, bisect.bisect_right(self.starts, e.start) - 1)
            while k < ninstr and instrs[k].op_offset < e.end:
                if instrs[k].op_offset >= e.start:
                    handler[k] = e
                k += 1
        self.handler = handler
        # successors by normal flow: (index, jumped)
        succ: List[Tuple[Tuple[int, bool], ...]] = []
        terminal, unconditional, not_jumps = T.TERMINAL, T.UNCONDITIONAL, T.NOT_JUMPS
        for k, ins in enumerate(instrs):
            op = ins.opcode
            if op in terminal:
                succ.append(())
            elif ins.target is not None and op not in not_jumps:
                t = index.get(ins.target)
                if t is None:
                    raise CodeMapError(f"{code.co_name}: jump from {ins.offset} "
                                       f"to {ins.target}, not an instruction")
                if op in unconditional:
                    succ.append(((t, True),))
                else:
                    succ.append(((k + 1, False), (t, True)))
            elif k + 1 < ninstr:
                succ.append(((k + 1, False),))
            else:
                succ.append(())
        self.succ = succ
        # kept here by the modules that compute them
        self.depths: Optional[List[Optional[int]]] = None      # stack.py
        self.kinds = None                                       # stack.py
        self.live: Dict[frozenset, object] = {}                 # liveness.py
        self.withs = None                                       # resume_points.py
        self.rescue = None                                      # resume_points.py
        self.preds = None
        self.targets = None
        self._lines = None
        self._positions = None

    # -- control flow ------------------------------------------------------

    def idx(self, offset: int) -> int:
        try:
            return self.index[offset]
        except KeyError:
            raise ValueError(f"{offset} is not an instruction offset of "
                             f"{self.code.co_name}") from None

    def owner(self, offset: int) -> int:
        """Index of the instruction that byte `offset` (opcode, prefix, cache) is in."""
        k = bisect.bisect_right(self.starts, offset) - 1
        if k < 0 or offset >= self.instrs[k].end:
            raise ValueError(f"offset {offset} is outside {self.code.co_name}")
        return k

    def normal_succ(self, k: int) -> Tuple[Tuple[int, bool], ...]:
        """(index, jumped) of the successors of instruction k, exceptions apart."""
        return self.succ[k]

    def jump_targets(self):
        if self.targets is None:
            self.targets = {ins.target for ins in self.instrs if ins.target is not None}
        return self.targets

    def predecessors(self) -> List[List[int]]:
        """Normal-flow predecessors of each instruction (exception edges apart)."""
        if self.preds is None:
            preds: List[List[int]] = [[] for _ in self.instrs]
            for i, ss in enumerate(self.succ):
                for t, _ in ss:
                    preds[t].append(i)
            self.preds = preds
        return self.preds

    # -- source positions ----------------------------------------------------

    def line_of(self, offset: int) -> Optional[int]:
        if self._lines is None:
            lines = {}
            for start, end, line in self.code.co_lines():
                for b in range(start, end, CODE_UNIT):
                    lines[b] = line
            self._lines = lines
        return self._lines.get(offset)

    def positions(self):
        """co_positions() as a list, one entry per code unit (caches included)."""
        if self._positions is None:
            self._positions = list(self.code.co_positions())
        return self._positions


@functools.lru_cache(maxsize=256)
def info(code: types.CodeType) -> Info:
    if not isinstance(code, types.CodeType):
        raise TypeError(f"expected a code object, got {type(code).__name__}")
    return Info(code)


def line_at(code, offset):
    """The source line of the instruction at byte `offset` of `code`, or None where
    it has none: the one reading of co_lines() for a single offset (Decoded.line_of
    keeps the whole table for a code object it is asked about many times)."""
    for start, end, line in code.co_lines():
        if start <= offset < end:
            return line
    return None
