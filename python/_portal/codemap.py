"""Static maps of CPython 3.11 bytecode that capture and restore rely on.

Pure Python over the public `dis`/`opcode` view of a code object (`co_code` is the
de-optimised bytecode: specialised instructions keep their offsets, so everything
computed here holds for the running, quickened code too). All offsets are in
bytes, as `dis` and `frame.f_lasti` give them; an instruction is 2 bytes and is
followed by its inline CACHE entries (2 bytes each).

What it answers:

* `parse_exception_table(code)`: the entries of `co_exceptiontable`.
* `static_stack_depths(code)`: the value-stack depth before each instruction
  (CFG walk with `dis.stack_effect`, exception edges included).
* `stack_kinds(code)`: what each stack slot holds before each instruction, as far
  as it can be told from the instruction that pushed it ('iter', 'exit', ...).
* `find_loop(code, loop_line)`: the resume point of a loop whose body the
  instrumenter wrapped as

      for x in it:                      # or: async for
          try:
              BODY
          except Exception:
              __portal_rescue__(LOOP_LINE)
              raise

  or, a while statement, wrapped whole (the call's second argument is the body's
  source span; `in_body(code, site, tb_lasti)` tells whether an error was raised
  in the body, not in the condition or the else clause):

      try:
          while cond:
              BODY
      except Exception:
          __portal_rescue__(LOOP_LINE, (line, col, end_line, end_col))
          raise

* `call_site(code, lasti)`: where a caller frame that is in the middle of a call
  must be resumed, and which of its stack slots belong to the call.
* `dead_locals_at(code, offset)`: the fast locals whose value can never be read
  again from `offset` (sound: a live variable is never reported dead).
* `with_sites(code)`: each `with` statement's BEFORE_WITH, the jump its handler
  takes when `__exit__` returns true (the error swallowed), and how its manager
  is made (`torch.autocast(...)`, a global `lock`): liveness takes a set of them
  whose `__exit__` is known never to swallow (withexit.py decides at the
  capture), so that a with block's handler does not keep a local of the last
  iteration alive (`with autocast(): loss = ...` then `loss.backward()`).

Everything raises `NotResumable(reason)` when the bytecode does not have the
shape that resuming needs, and `CodeMapError` when the bytecode contradicts what
this module knows of 3.11 (a bug here, or another Python version).
"""
from __future__ import annotations

import bisect
import dis
import functools
import opcode
import sys
import types
from typing import Dict, List, NamedTuple, Optional, Set, Tuple

__all__ = [
    "NotResumable", "CodeMapError",
    "ExceptionEntry", "Instr", "LoopSite", "CallSite",
    "parse_exception_table", "instructions", "static_stack_depths", "in_body",
    "stack_kinds", "find_loop", "find_loops", "call_site", "for_iter_depth",
    "dead_locals_at", "live_locals_at", "RESCUE_NAME", "WithSite", "with_sites",
]

if sys.version_info[:2] != (3, 11):  # pragma: no cover - the layout is 3.11's
    raise ImportError("_portal.codemap understands CPython 3.11 bytecode only")

RESCUE_NAME = "__portal_rescue__"


class NotResumable(Exception):
    """The code has no usable resume point here; `reason` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class CodeMapError(Exception):
    """The bytecode contradicts this module's model of CPython 3.11."""


class ExceptionEntry(NamedTuple):
    start: int      # first byte offset covered
    end: int        # one past the last byte offset covered
    target: int     # handler offset
    depth: int      # stack depth the handler starts from (before lasti/exc)
    lasti: bool     # whether the offset of the raising instruction is pushed


class Instr(NamedTuple):
    offset: int             # start, including any EXTENDED_ARG prefix
    op_offset: int          # offset of the opcode itself
    opcode: int
    opname: str
    arg: Optional[int]      # full argument (EXTENDED_ARG applied), None if none
    end: int                # offset of the next instruction (caches skipped)
    target: Optional[int]   # jump target offset, for jumps


class LoopSite(NamedTuple):
    loop_line: int
    handler: int                # offset of the handler (PUSH_EXC_INFO)
    depth: int                  # stack depth of the handler == depth at body_start
    body_start: int             # where to resume: first instruction of the body
    is_for: bool                # a (synchronous) for loop: FOR_ITER before the body
    iter_slot: Optional[int]    # stack slot of the loop's iterator (for-loops)
    for_iter: Optional[int]     # offset of the loop's FOR_ITER (for-loops)
    stack_kinds: Tuple[str, ...]  # kind of each slot below depth (see stack_kinds)
    rescue_call: int            # offset of the CALL to __portal_rescue__
    loop_kind: str              # 'for', 'while' or 'async_for'
    # while loops (the whole statement wrapped): the body's source span (line,
    # col, end_line, end_col), from the rescue call's second argument; see in_body
    body_span: Optional[Tuple[int, int, int, int]] = None
    # The handler is entered with the raising instruction's offset pushed above the
    # loop's stack (reraise.py): the handled exception's slot is one higher.
    lasti: bool = False


class CallSite(NamedTuple):
    kind: str                   # 'call' (PRECALL/CALL, KW_NAMES before them or
                                # not), 'call_ex' (CALL_FUNCTION_EX), 'for_iter'
    resume_offset: int          # where to resume the caller (KW_NAMES/PRECALL/...)
    call_offset: int            # the CALL/CALL_FUNCTION_EX/FOR_ITER instruction
    depth: int                  # static depth at resume_offset
    depth_below_call: int       # slots of the frame's stack not used by the call
    nargs: int                  # 'call': arguments (positional + keyword values)
    kw_names: Tuple[str, ...]   # 'call': keyword names (empty when none)
    n_slots: int                # slots used by the call: depth - depth_below_call
    has_kwargs: bool            # 'call': KW_NAMES; 'call_ex': a **kwargs dict


class WithSite(NamedTuple):
    before_with: int            # offset of the BEFORE_WITH
    suppress_jump: int          # offset of the handler's POP_JUMP_FORWARD_IF_TRUE,
                                # taken when __exit__ returns true
    # How the manager is made, when the code says it plainly, else None:
    # (how, scope, names): how 'call' (`NAMES(...)`) or 'value' (`with NAMES:`),
    # scope 'global' (LOAD_GLOBAL: globals, then builtins) or 'name' (LOAD_NAME,
    # module level), names the dotted name (('torch', 'autocast')).
    manager: Optional[Tuple[str, str, Tuple[str, ...]]]


# --------------------------------------------------------------------------
# decoding

_OPNAME = opcode.opname
_HAVE_ARGUMENT = opcode.HAVE_ARGUMENT
_EXTENDED_ARG = opcode.EXTENDED_ARG
_CACHES = opcode._inline_cache_entries
_HASJREL = frozenset(opcode.hasjrel)
_HASJABS = frozenset(opcode.hasjabs)
_BACKWARD = frozenset(op for op in opcode.hasjrel if "JUMP_BACKWARD" in _OPNAME[op])
_UNCONDITIONAL = frozenset(opcode.opmap[n] for n in (
    "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT"))
_TERMINAL = frozenset(opcode.opmap[n] for n in (
    "RETURN_VALUE", "RAISE_VARARGS", "RERAISE"))
_OP = opcode.opmap

_LOAD_FAST = _OP["LOAD_FAST"]
_STORE_FAST = _OP["STORE_FAST"]
_DELETE_FAST = _OP["DELETE_FAST"]
_NOP = _OP["NOP"]
_FOR_ITER = _OP["FOR_ITER"]
_PRECALL = _OP["PRECALL"]
_CALL = _OP["CALL"]
_KW_NAMES = _OP["KW_NAMES"]
_CALL_FUNCTION_EX = _OP["CALL_FUNCTION_EX"]
_PUSH_EXC_INFO = _OP["PUSH_EXC_INFO"]
_LOAD_GLOBAL = _OP["LOAD_GLOBAL"]
_LOAD_NAME = _OP["LOAD_NAME"]
_LOAD_CONST = _OP["LOAD_CONST"]
_RETURN_GENERATOR = _OP["RETURN_GENERATOR"]


def _varint(data: bytes, i: int) -> Tuple[int, int]:
    b = data[i]
    val = b & 63
    i += 1
    while b & 64:
        b = data[i]
        i += 1
        val = (val << 6) | (b & 63)
    return val, i


def parse_exception_table(code: types.CodeType) -> List[ExceptionEntry]:
    """The entries of `code.co_exceptiontable`, offsets in bytes, `end` exclusive.

    Same result as `dis._parse_exception_table(code)` (tested on the stdlib).
    Entries do not overlap: an offset is covered by at most one (the innermost
    handler), as the interpreter's lookup assumes.
    """
    return list(_exception_table(code))


@functools.lru_cache(maxsize=512)
def _exception_table(code: types.CodeType) -> Tuple[ExceptionEntry, ...]:
    data = code.co_exceptiontable
    out = []
    i, n = 0, len(data)
    while i < n:
        start, i = _varint(data, i)
        length, i = _varint(data, i)
        target, i = _varint(data, i)
        dl, i = _varint(data, i)
        out.append(ExceptionEntry(start * 2, (start + length) * 2, target * 2,
                                  dl >> 1, bool(dl & 1)))
    return tuple(out)


def instructions(code: types.CodeType) -> List[Instr]:
    """The instructions of `code` in order, EXTENDED_ARG folded into the next."""
    return list(_info(code).instrs)


class _Info:
    """Per-code-object analyses, computed lazily and cached."""

    def __init__(self, code: types.CodeType):
        self.code = code
        raw = code.co_code
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
            if op == _EXTENDED_ARG:
                ext = (ext | raw[i + 1]) << 8
                i += 2
                continue
            arg = (ext | raw[i + 1]) if op >= _HAVE_ARGUMENT else None
            ext = 0
            end = i + 2 + 2 * _CACHES[op]
            target = None
            if op in _HASJREL:
                target = i + 2 - 2 * arg if op in _BACKWARD else i + 2 + 2 * arg
            elif op in _HASJABS:  # none in 3.11; kept for completeness
                target = 2 * arg
            append(new(Instr, (start, i, op, _OPNAME[op], arg, end, target)))
            start = None
            i = end
        self.instrs: Tuple[Instr, ...] = tuple(instrs)
        self.size = n
        self.starts = [ins.offset for ins in instrs]
        index: Dict[int, int] = {}
        for k, ins in enumerate(instrs):
            index[ins.offset] = k
            if ins.op_offset != ins.offset:
                index[ins.op_offset] = k
        self.index = index
        self.table = _exception_table(code)
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
        for k, ins in enumerate(instrs):
            op = ins.opcode
            if op in _TERMINAL:
                succ.append(())
            elif ins.target is not None:
                t = index.get(ins.target)
                if t is None:
                    raise CodeMapError(f"{code.co_name}: jump from {ins.offset} "
                                       f"to {ins.target}, not an instruction")
                if op in _UNCONDITIONAL:
                    succ.append(((t, True),))
                else:
                    succ.append(((k + 1, False), (t, True)))
            elif k + 1 < ninstr:
                succ.append(((k + 1, False),))
            else:
                succ.append(())
        self.succ = succ
        self._depths: Optional[List[Optional[int]]] = None
        self._kinds = None
        self._live: Dict[frozenset, "_Live"] = {}
        self._withs = None
        self._lines = None
        self._rescue = None
        self._preds = None
        self._targets = None

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

    # -- stack depths ------------------------------------------------------

    def depths(self) -> List[Optional[int]]:
        if self._depths is None:
            self._depths = self._compute_depths()
        return self._depths

    def _compute_depths(self) -> List[Optional[int]]:
        instrs = self.instrs
        depth: List[Optional[int]] = [None] * len(instrs)
        if not instrs:
            return depth
        depth[0] = 0
        work = [0]

        def put(t: int, d: int, frm: int) -> None:
            old = depth[t]
            if old is None:
                depth[t] = d
                work.append(t)
            elif old != d:
                raise CodeMapError(
                    f"{self.code.co_name}: stack depth {old} and {d} at offset "
                    f"{instrs[t].offset} (from {instrs[frm].offset})")

        while work:
            k = work.pop()
            d = depth[k]
            ins = instrs[k]
            e = self.handler[k]
            if e is not None:
                if e.depth > d:
                    raise CodeMapError(
                        f"{self.code.co_name}: handler depth {e.depth} above stack "
                        f"depth {d} at offset {ins.offset}")
                put(self.idx(e.target), e.depth + e.lasti + 1, k)
            for t, jumped in self.normal_succ(k):
                nd = d + _effect(ins.opcode, ins.arg, jumped)
                if nd < 0:
                    raise CodeMapError(f"{self.code.co_name}: negative stack depth "
                                       f"after offset {ins.offset}")
                put(t, nd, k)
        return depth

    # -- stack kinds -------------------------------------------------------

    def kinds(self) -> List[Optional[Tuple[str, ...]]]:
        if self._kinds is None:
            self._kinds = self._compute_kinds()
        return self._kinds

    def _compute_kinds(self) -> List[Optional[Tuple[str, ...]]]:
        instrs = self.instrs
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
                    raise CodeMapError(f"{self.code.co_name}: stack height "
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
            e = self.handler[k]
            if e is not None:
                put(self.idx(e.target),
                    st[:e.depth] + (("lasti",) if e.lasti else ()) + ("exception",))
            for t, jumped in self.normal_succ(k):
                put(t, _kind_step(ins, st, jumped))
        return state

    # -- lines ---------------------------------------------------------------

    def line_of(self, offset: int) -> Optional[int]:
        if self._lines is None:
            lines = {}
            for start, end, line in self.code.co_lines():
                for b in range(start, end, 2):
                    lines[b] = line
            self._lines = lines
        return self._lines.get(offset)


@functools.lru_cache(maxsize=256)
def _info(code: types.CodeType) -> _Info:
    if not isinstance(code, types.CodeType):
        raise TypeError(f"expected a code object, got {type(code).__name__}")
    return _Info(code)


@functools.lru_cache(maxsize=8192)
def _effect(op: int, arg: Optional[int], jumped: bool) -> int:
    if op == _RETURN_GENERATOR:
        # The frame returns the generator; when it is first resumed,
        # gen_send_ex pushes the sent value (None), which POP_TOP drops.
        return 1
    return dis.stack_effect(op, arg if op >= _HAVE_ARGUMENT else None, jump=jumped)


# --------------------------------------------------------------------------
# stack depths and kinds

def static_stack_depths(code: types.CodeType) -> Dict[int, int]:
    """{offset: stack depth before the instruction} for every reachable instruction.

    Keys are instruction offsets; an instruction with an EXTENDED_ARG prefix is
    listed under both the prefix's offset and the opcode's. Exception handlers
    start at the depth of their table entry, +1 for lasti if pushed, +1 for the
    exception. Unreachable instructions are absent.
    """
    info = _info(code)
    out: Dict[int, int] = {}
    for ins, d in zip(info.instrs, info.depths()):
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
    for ins, st in zip(info.instrs, info.kinds()):
        if st is not None:
            out[ins.offset] = st
            out[ins.op_offset] = st
    return out


def _pops(ins: Instr, jumped: bool) -> int:
    """How many stack items the instruction consumes (or replaces)."""
    name, arg = ins.opname, ins.arg
    p = _FIXED_POPS.get(name)
    if p is not None:
        return p
    if name in ("BUILD_TUPLE", "BUILD_LIST", "BUILD_SET", "BUILD_STRING",
                "BUILD_SLICE", "RAISE_VARARGS"):
        return arg
    if name == "BUILD_MAP":
        return 2 * arg
    if name == "BUILD_CONST_KEY_MAP":
        return arg + 1
    if name == "MAKE_FUNCTION":
        return 1 + bin(arg & 0xF).count("1")
    if name == "FORMAT_VALUE":
        return 2 if (arg & 4) else 1
    if name == "CALL_FUNCTION_EX":
        return 3 + (arg & 1)
    if name == "PRECALL":
        return arg + 2
    if name == "FOR_ITER":
        return 1 if jumped else 0
    if name == "JUMP_IF_FALSE_OR_POP" or name == "JUMP_IF_TRUE_OR_POP":
        return 0 if jumped else 1
    if name == "SEND":
        return 2 if jumped else 1
    if name == "RERAISE":
        return 1
    eff = _effect(ins.opcode, arg, jumped)
    return max(0, -eff)


_FIXED_POPS = {
    "POP_TOP": 1, "PUSH_NULL": 0, "NOP": 0, "UNARY_POSITIVE": 1,
    "UNARY_NEGATIVE": 1, "UNARY_NOT": 1, "UNARY_INVERT": 1, "BINARY_SUBSCR": 2,
    "GET_LEN": 0, "MATCH_MAPPING": 0, "MATCH_SEQUENCE": 0, "MATCH_KEYS": 0,
    "CHECK_EXC_MATCH": 1, "CHECK_EG_MATCH": 2, "WITH_EXCEPT_START": 0,
    "GET_AITER": 1, "GET_ANEXT": 0, "BEFORE_ASYNC_WITH": 1, "BEFORE_WITH": 1,
    "END_ASYNC_FOR": 2, "STORE_SUBSCR": 3, "DELETE_SUBSCR": 2, "GET_ITER": 1,
    "GET_YIELD_FROM_ITER": 1, "PRINT_EXPR": 1, "LOAD_BUILD_CLASS": 0,
    "LOAD_ASSERTION_ERROR": 0, "RETURN_GENERATOR": 0, "LIST_TO_TUPLE": 1,
    "RETURN_VALUE": 1, "IMPORT_STAR": 1, "SETUP_ANNOTATIONS": 0, "YIELD_VALUE": 1,
    "ASYNC_GEN_WRAP": 1, "PREP_RERAISE_STAR": 2, "POP_EXCEPT": 1, "STORE_NAME": 1,
    "DELETE_NAME": 0, "UNPACK_SEQUENCE": 1, "UNPACK_EX": 1, "STORE_ATTR": 2,
    "DELETE_ATTR": 1, "STORE_GLOBAL": 1, "DELETE_GLOBAL": 0, "LOAD_CONST": 0,
    "LOAD_NAME": 0, "LOAD_ATTR": 1, "COMPARE_OP": 2, "IMPORT_NAME": 2,
    "IMPORT_FROM": 0, "JUMP_FORWARD": 0, "POP_JUMP_FORWARD_IF_FALSE": 1,
    "POP_JUMP_FORWARD_IF_TRUE": 1, "LOAD_GLOBAL": 0, "IS_OP": 2, "CONTAINS_OP": 2,
    "BINARY_OP": 2, "LOAD_FAST": 0, "STORE_FAST": 1, "DELETE_FAST": 0,
    "POP_JUMP_FORWARD_IF_NOT_NONE": 1, "POP_JUMP_FORWARD_IF_NONE": 1,
    "GET_AWAITABLE": 1, "JUMP_BACKWARD_NO_INTERRUPT": 0, "MAKE_CELL": 0,
    "LOAD_CLOSURE": 0, "LOAD_DEREF": 0, "STORE_DEREF": 1, "DELETE_DEREF": 0,
    "JUMP_BACKWARD": 0, "LIST_APPEND": 1, "SET_ADD": 1, "MAP_ADD": 2,
    "LOAD_CLASSDEREF": 0, "COPY_FREE_VARS": 0, "RESUME": 0, "MATCH_CLASS": 3,
    "LOAD_METHOD": 1, "LIST_EXTEND": 1, "SET_UPDATE": 1, "DICT_MERGE": 1,
    "DICT_UPDATE": 1, "CALL": 2, "KW_NAMES": 0,
    "POP_JUMP_BACKWARD_IF_NOT_NONE": 1, "POP_JUMP_BACKWARD_IF_NONE": 1,
    "POP_JUMP_BACKWARD_IF_FALSE": 1, "POP_JUMP_BACKWARD_IF_TRUE": 1,
}

_PUSH_KINDS = {
    "GET_ITER": ("iter",),
    "GET_AITER": ("aiter",),
    "BEFORE_WITH": ("exit", "unknown"),
    "BEFORE_ASYNC_WITH": ("exit", "unknown"),
}


_COPY = _OP["COPY"]
_SWAP = _OP["SWAP"]


@functools.lru_cache(maxsize=8192)
def _transfer(op: int, arg: Optional[int], jumped: bool) -> Tuple[int, Tuple[str, ...]]:
    """(items popped, kinds pushed) for an instruction other than COPY, SWAP and
    PUSH_EXC_INFO."""
    ins = Instr(0, 0, op, _OPNAME[op], arg, 0, None)
    pops = _pops(ins, jumped)
    pushes = pops + _effect(op, arg, jumped)
    if pushes < 0:
        raise CodeMapError(f"{_OPNAME[op]}: pops {pops}, pushes {pushes}")
    kinds = _PUSH_KINDS.get(_OPNAME[op])
    if kinds is None or len(kinds) != pushes:
        kinds = ("unknown",) * pushes
    return pops, kinds


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
    pops, kinds = _transfer(op, ins.arg, jumped)
    if pops > len(st):
        raise CodeMapError(f"{ins.opname} at {ins.offset}: pops {pops} "
                           f"from a stack of {len(st)}")
    return (st[:len(st) - pops] if pops else st) + kinds


# --------------------------------------------------------------------------
# loops

def _rescue_calls(info: _Info, loop_line: int) -> List[Tuple[int, int]]:
    """(index of the LOAD of __portal_rescue__, index of its CALL) per call site."""
    if info._rescue is None:
        info._rescue = _scan_rescue_calls(info)
    return info._rescue.get(loop_line, [])


def _scan_rescue_calls(info: _Info) -> Dict[int, List[Tuple[int, int]]]:
    code = info.code
    out: Dict[int, List[Tuple[int, int]]] = {}
    if RESCUE_NAME not in code.co_names:
        return out
    instrs = info.instrs
    for k, ins in enumerate(instrs):
        if ins.opcode == _LOAD_GLOBAL:
            name = code.co_names[ins.arg >> 1]
        elif ins.opcode == _LOAD_NAME:
            name = code.co_names[ins.arg]
        else:
            continue
        if name != RESCUE_NAME or k + 3 >= len(instrs):
            continue
        c = instrs[k + 1]
        if c.opcode != _LOAD_CONST:
            continue
        value = code.co_consts[c.arg]
        if type(value) is not int:
            continue
        j = k + 2
        while j < len(instrs) and instrs[j].opcode == _LOAD_CONST:
            j += 1
        if (j + 1 < len(instrs) and instrs[j].opcode == _PRECALL
                and instrs[j + 1].opcode == _CALL):
            out.setdefault(value, []).append((k, j + 1))
    return out


def _handler_of_call(info: _Info, k: int) -> int:
    """Index of the handler start (PUSH_EXC_INFO) whose code reaches index k."""
    if info._preds is None:
        preds: List[List[int]] = [[] for _ in info.instrs]
        for i, ss in enumerate(info.succ):
            for t, _ in ss:
                preds[t].append(i)
        info._preds = preds
    preds = info._preds
    seen = {k}
    work = [k]
    found = set()
    while work:
        i = work.pop()
        if info.instrs[i].opcode == _PUSH_EXC_INFO:
            found.add(i)
            continue
        for p in preds[i]:
            if p not in seen:
                seen.add(p)
                work.append(p)
    if len(found) != 1:
        raise NotResumable(
            f"the __portal_rescue__ call at offset {info.instrs[k].offset} is not "
            f"inside exactly one exception handler ({len(found)} found)")
    return found.pop()


def find_loops(code: types.CodeType, loop_line: int) -> List[LoopSite]:
    """Every resumable wrapped loop of `code` marked with `loop_line`.

    There is more than one when the compiler duplicated the loop (a loop inside
    a `finally` block is compiled once for the normal and once for the
    exceptional path). Raises NotResumable when there is none.
    """
    info = _info(code)
    calls = _rescue_calls(info, loop_line)
    if not calls:
        raise NotResumable(f"no {RESCUE_NAME}({loop_line}) handler in "
                           f"{code.co_name}")
    sites = []
    errors = []
    for load_k, call_k in calls:
        try:
            sites.append(_loop_site(info, loop_line, load_k, call_k))
        except NotResumable as e:
            errors.append(e.reason)
    if not sites:
        raise NotResumable("; ".join(errors))
    return sites


def find_loop(code: types.CodeType, loop_line: int,
              lasti: Optional[int] = None) -> LoopSite:
    """The resume point of the wrapped loop marked with `loop_line`.

    `lasti`, the frame's f_lasti while it calls __portal_rescue__, picks the copy
    that is running when the loop was duplicated by the compiler (a loop inside
    a `finally`); without it a duplicated loop raises NotResumable.
    """
    info = _info(code)
    if lasti is not None:
        for load_k, call_k in _rescue_calls(info, loop_line):
            lo = info.instrs[load_k].offset
            hi = info.instrs[call_k].end
            if lo <= lasti < hi:
                return _loop_site(info, loop_line, load_k, call_k)
        raise NotResumable(f"offset {lasti} is not in a {RESCUE_NAME}"
                           f"({loop_line}) call of {code.co_name}")
    sites = find_loops(code, loop_line)
    if len(sites) != 1:
        raise NotResumable(f"loop at line {loop_line} is compiled {len(sites)} "
                           f"times in {code.co_name} (inside a finally?); the "
                           f"frame's lasti is needed to tell which is running")
    return sites[0]


def _loop_site(info: _Info, loop_line: int, load_k: int, call_k: int) -> LoopSite:
    instrs = info.instrs
    h_k = _handler_of_call(info, load_k)
    handler = instrs[h_k].offset
    entries = [e for e in info.table if e.target == handler]
    if not entries:
        raise NotResumable(f"the body of the loop at line {loop_line} cannot "
                           f"raise (its handler has no exception-table entry)")
    depths = {(e.depth, e.lasti) for e in entries}
    if len(depths) != 1:
        raise NotResumable(f"handler at {handler} is entered at several depths")
    # lasti: the handler is entered with the raising instruction's offset pushed
    # above the loop's stack (reraise.py); the loop's stack is the same.
    depth, lasti = depths.pop()

    # Handlers nested in ours: their handler code is covered by an entry that
    # goes to a handler already in the set.
    nested = {handler}
    changed = True
    while changed:
        changed = False
        for e in info.table:
            if e.target in nested:
                continue
            hk = info.idx(e.target)
            cover = info.handler[hk]
            if cover is not None and cover.target in nested:
                nested.add(e.target)
                changed = True
    start = min(e.start for e in info.table if e.target in nested)
    k = info.idx(start)
    dlist = info.depths()
    span = _body_span(info, load_k, call_k)
    if span is not None:
        return _while_site(info, loop_line, call_k, handler, depth, nested, k, span)._replace(
            lasti=lasti)
    # The body may begin with NOPs that no entry covers (the `try` line's NOP):
    # include them, but never step back over a jump target (a while loop's head).
    targets = _jump_targets(info)
    while (instrs[k].offset not in targets and k > 0
           and instrs[k - 1].opcode == _NOP and dlist[k - 1] == depth
           and info.handler[k - 1] is None):
        k -= 1
    body_start = instrs[k].offset
    d = dlist[k]
    if d is None:
        raise NotResumable(f"body start {body_start} is unreachable")
    if d != depth:
        raise NotResumable(f"stack depth {d} at the body start {body_start} "
                           f"differs from the handler depth {depth}")

    # for-loop: FOR_ITER at the handler depth, then the target stores (straight
    # code above that depth, no jumps), then the body.
    is_for = False
    for_iter = None
    j = k - 1
    while (j >= 0 and dlist[j] is not None and dlist[j] > depth
           and instrs[j].target is None and instrs[j].opcode not in _TERMINAL
           and instrs[j].offset not in targets):
        j -= 1
    if (j >= 0 and instrs[j].opcode == _FOR_ITER and dlist[j] == depth
            and info.line_of(instrs[j].op_offset) == loop_line):
        is_for = True
        for_iter = instrs[j].offset
    kinds = info.kinds()[k]
    kinds = tuple(kinds[:depth]) if kinds is not None else ("unknown",) * depth
    loop_kind = "for" if is_for else "while"
    if not is_for and kinds and kinds[-1] == "aiter":
        loop_kind = "async_for"
    return LoopSite(
        loop_line=loop_line, handler=handler, depth=depth, body_start=body_start,
        is_for=is_for, iter_slot=depth - 1 if is_for else None, for_iter=for_iter,
        stack_kinds=kinds, rescue_call=instrs[call_k].offset, loop_kind=loop_kind, lasti=lasti)


def _body_span(info: _Info, load_k: int, call_k: int):
    """The rescue call's second argument, a while loop's body span, or None."""
    if call_k - load_k < 4:         # LOAD rescue, LOAD_CONST line, LOAD_CONST span, PRECALL
        return None
    c = info.instrs[load_k + 2]
    if c.opcode != _LOAD_CONST:
        return None
    value = info.code.co_consts[c.arg]
    if (type(value) is tuple and len(value) == 4
            and all(type(v) is int for v in value)):
        return value
    return None


def _in_span(pos, span) -> bool:
    line, end_line, col, end_col = pos
    if line is None or end_line is None:
        return False
    if col is None or end_col is None:
        return span[0] <= line and end_line <= span[2]
    return (span[0], span[1]) <= (line, col) and (end_line, end_col) <= (span[2], span[3])


def _positions(info: _Info):
    if getattr(info, "_positions", None) is None:
        info._positions = list(info.code.co_positions())
    return info._positions


def in_body(code: types.CodeType, site: LoopSite, offset: int) -> bool:
    """Is the instruction at `offset` (a traceback's tb_lasti: the instruction that
    raised, or a CACHE entry of the call that raised) part of the loop's body?

    For a while loop (the whole statement wrapped) its source position must lie
    within the body's span: the loop's condition (both copies), its else clause
    and the handler are not the body.  For other loops every offset covered by
    the wrap is the body."""
    if site.body_span is None:
        return True
    info = _info(code)
    if offset < 0 or offset >= len(code.co_code):
        return False
    k = info.owner(offset - offset % 2)
    pos = _positions(info)[info.instrs[k].offset // 2]
    return _in_span(pos, site.body_span)


def _while_site(info: _Info, loop_line: int, call_k: int, handler: int, depth: int,
                nested: Set[int], k: int, span) -> LoopSite:
    """A while statement wrapped whole: the try covers the loop head (the
    condition), the body, the condition at the bottom and the else clause.  The
    body starts at its first instruction in layout order (the target of the
    bottom test's backward jump; with `while True` the instruction after the
    head's NOP)."""
    instrs = info.instrs
    positions = _positions(info)
    dlist = info.depths()
    h_k = info.idx(handler)
    body_k = None
    for j in range(k, h_k):
        if _in_span(positions[instrs[j].offset // 2], span) and dlist[j] is not None:
            body_k = j
            break
    if body_k is None:
        raise NotResumable(f"the body of the while loop at line {loop_line} has no "
                           f"reachable instruction")
    body_start = instrs[body_k].offset
    d = dlist[body_k]
    if d != depth:
        raise NotResumable(f"stack depth {d} at the body start {body_start} "
                           f"differs from the handler depth {depth}")
    kinds = info.kinds()[body_k]
    kinds = tuple(kinds[:depth]) if kinds is not None else ("unknown",) * depth
    return LoopSite(
        loop_line=loop_line, handler=handler, depth=depth, body_start=body_start,
        is_for=False, iter_slot=None, for_iter=None, stack_kinds=kinds,
        rescue_call=instrs[call_k].offset, loop_kind="while", body_span=tuple(span))


def _jump_targets(info: _Info) -> Set[int]:
    if info._targets is None:
        info._targets = {ins.target for ins in info.instrs if ins.target is not None}
    return info._targets


# --------------------------------------------------------------------------
# callers

def call_site(code: types.CodeType, lasti: int) -> CallSite:
    """Where to resume a caller frame whose `f_lasti` is `lasti`, mid-call.

    An inlined Python-to-Python call leaves f_lasti on the last CACHE entry of
    CALL; a call made through C leaves it on CALL or on PRECALL (specialised
    PRECALLs call builtins themselves). The resume point is the PRECALL, or the
    KW_NAMES before it (KW_NAMES keeps the keyword names in a C local that must
    be set again). `f(*a, **k)` resumes at its CALL_FUNCTION_EX, with its
    operands still on the stack. A frame that drives a generator from a for-loop
    is at FOR_ITER ('for_iter', the iterator being the one slot of the call).
    Anything else (a call made by an operator, an attribute access, ...) raises
    NotResumable.
    """
    info = _info(code)
    if lasti % 2:
        raise ValueError(f"offset {lasti} is odd")
    k = info.owner(lasti)
    ins = info.instrs[k]
    dlist = info.depths()
    name = ins.opname
    if ins.opcode == _CALL:
        if k == 0 or info.instrs[k - 1].opcode != _PRECALL:
            raise CodeMapError(f"CALL at {ins.offset} without PRECALL")
        call_k = k
        k -= 1
    elif ins.opcode == _PRECALL:
        call_k = k + 1
    elif ins.opcode == _CALL_FUNCTION_EX:
        d = dlist[k]
        if d is None:
            raise NotResumable(f"offset {ins.offset} is unreachable")
        n = 3 + (ins.arg & 1)       # NULL, callable, args tuple[, kwargs dict]
        return CallSite("call_ex", ins.offset, ins.offset, d, d - n, 0, (), n,
                        bool(ins.arg & 1))
    elif ins.opcode == _FOR_ITER:
        d = dlist[k]
        if d is None:
            raise NotResumable(f"offset {ins.offset} is unreachable")
        return CallSite("for_iter", ins.offset, ins.offset, d, d - 1, 0, (), 1, False)
    else:
        raise NotResumable(f"{code.co_name} is in {name} at offset {ins.offset}, "
                           f"not in a call it can be resumed at")
    pre = info.instrs[k]
    nargs = pre.arg
    kw_names: Tuple[str, ...] = ()
    if k > 0 and info.instrs[k - 1].opcode == _KW_NAMES:
        k -= 1
        kw_names = tuple(code.co_consts[info.instrs[k].arg])
    d = dlist[k]
    if d is None:
        raise NotResumable(f"offset {info.instrs[k].offset} is unreachable")
    n = nargs + 2                   # NULL/callable or callable/self, then the args
    if d < n:
        raise CodeMapError(f"depth {d} below the {n} slots of the call at "
                           f"{pre.offset}")
    return CallSite("call", info.instrs[k].offset, info.instrs[call_k].offset, d,
                    d - n, nargs, kw_names, n, bool(kw_names))


def for_iter_depth(code: types.CodeType, lasti: int) -> Optional[int]:
    """Stack depth at the FOR_ITER that `lasti` is on (the iterator being the
    top slot), or None when `lasti` is not on a FOR_ITER: a frame driving a
    generator from a for-loop is suspended there."""
    info = _info(code)
    if lasti % 2:
        raise ValueError(f"offset {lasti} is odd")
    k = info.owner(lasti)
    if info.instrs[k].opcode != _FOR_ITER:
        return None
    return info.depths()[k]


# --------------------------------------------------------------------------
# liveness

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


def _may_introspect(info) -> bool:
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
            name = code.co_names[ins.arg >> 1]
        elif ins.opname == "LOAD_NAME":
            name = code.co_names[ins.arg]
        else:
            continue
        if name in wanted:
            return True
    return False


def slot_names(code: types.CodeType) -> List[str]:
    """The names of the fast-local slots (localsplus) in slot order: locals, then
    cells that are not arguments, then free variables (an argument that is a cell
    has one slot)."""
    nlocalsplus = code.co_nlocals + len(code.co_cellvars) + len(code.co_freevars)
    names = []
    for i in range(nlocalsplus):
        try:
            names.append(code._varname_from_oparg(i))
        except (AttributeError, IndexError, ValueError):
            break
    return names


class _Live:
    """Backward liveness over basic blocks.  `cut`: indices of conditional jumps
    whose jumped edge cannot be taken (the "__exit__ returned true" jump of a with
    statement whose manager never swallows an error)."""

    def __init__(self, info: _Info, cut: frozenset = frozenset()):
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
        self._solve()

    def _solve(self) -> None:
        info = self.info
        instrs = info.instrs
        n = len(instrs)
        targets = _jump_targets(info)
        leaders = {0}
        for k, ins in enumerate(instrs):
            if ins.target is not None or ins.opcode in _TERMINAL:
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
                u, d = self._use_def(instrs[k])
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

    def _use_def(self, ins: Instr) -> Tuple[int, int]:
        op = ins.opcode
        if op == _LOAD_FAST or op == _DELETE_FAST:
            # DELETE_FAST raises if unbound: its variable's state is used
            return (1 << ins.arg) & self.tracked, 0
        if op == _STORE_FAST:
            return 0, (1 << ins.arg) & self.tracked
        return 0, 0

    def live_at(self, k: int) -> int:
        b = self.block_of[k]
        s, t = self.bounds[b]
        live = 0
        for s2 in self.succ[b]:
            live |= self.live_in[s2]
        e = self.live_in[self.exc[b]] if self.exc[b] is not None else 0
        for j in range(t - 1, k - 1, -1):
            u, d = self._use_def(self.info.instrs[j])
            live = (live & ~d) | u | e
        return live


def _live(info: _Info, never_suppress=()) -> _Live:
    cut = _cut_edges(info, never_suppress)
    lv = info._live.get(cut)
    if lv is None:
        lv = info._live[cut] = _Live(info, cut)
    return lv


def _cut_edges(info: _Info, never_suppress) -> frozenset:
    """The suppress jumps of the with statements (BEFORE_WITH offsets) whose
    __exit__ never returns true: those jumps are never taken."""
    if not never_suppress:
        return frozenset()
    wanted = set(never_suppress)
    return frozenset(info.idx(w.suppress_jump) for w in _withs(info) if w.before_with in wanted)


def live_locals_at(code: types.CodeType, offset: int, never_suppress=()) -> Set[str]:
    """Plain fast locals that may be read (or deleted) from `offset` on.

    Cell and free variables are not plain locals and are always to be kept.
    never_suppress: as for dead_locals_at.
    """
    info = _info(code)
    k = info.idx(offset)
    lv = _live(info, never_suppress)
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
    lv = _live(info, never_suppress)
    if lv.everything:
        return set()
    bits = lv.live_at(k) | lv.always
    return {nm for i, nm in enumerate(lv.names)
            if lv.tracked >> i & 1 and not bits >> i & 1}


# --------------------------------------------------------------------------
# with statements

_BEFORE_WITH = _OP["BEFORE_WITH"]
_WITH_EXCEPT_START = _OP["WITH_EXCEPT_START"]
_POP_JUMP_FORWARD_IF_TRUE = _OP["POP_JUMP_FORWARD_IF_TRUE"]
_PUSH_NULL = _OP["PUSH_NULL"]
_LOAD_ATTR = _OP["LOAD_ATTR"]
_LOAD_METHOD = _OP["LOAD_METHOD"]


def with_sites(code: types.CodeType) -> List[WithSite]:
    """The (synchronous) with statements of `code` whose handler has 3.11's
    shape: PUSH_EXC_INFO, WITH_EXCEPT_START, POP_JUMP_FORWARD_IF_TRUE (to the
    "swallowed" path), in the table entry that covers the instruction after
    BEFORE_WITH."""
    return list(_withs(_info(code)))


def _withs(info: _Info) -> Tuple[WithSite, ...]:
    if info._withs is None:
        info._withs = tuple(_find_withs(info))
    return info._withs


def _find_withs(info: _Info):
    instrs = info.instrs
    n = len(instrs)
    for k, ins in enumerate(instrs):
        if ins.opcode != _BEFORE_WITH or k + 1 >= n:
            continue
        e = info.handler[k + 1]
        if e is None:
            continue
        h = info.index.get(e.target)
        if h is None or h + 2 >= n or instrs[h].opcode != _PUSH_EXC_INFO \
                or instrs[h + 1].opcode != _WITH_EXCEPT_START \
                or instrs[h + 2].opcode != _POP_JUMP_FORWARD_IF_TRUE:
            continue
        yield WithSite(ins.offset, instrs[h + 2].offset, _manager(info, k))


def _manager(info: _Info, k: int):
    """How the manager BEFORE_WITH (index k) takes is made, when it is one of
    `NAME.ATTR...(ARGS)` or `NAME.ATTR...` in straight-line code; else None."""
    instrs = info.instrs
    depths = info.depths()
    if depths[k] is None or depths[k] < 1:
        return None
    base = depths[k] - 1            # below the manager
    targets = _jump_targets(info)
    j = k - 1
    while j >= 0 and depths[j] is not None and depths[j] > base:
        j -= 1
    if j < 0 or depths[j] != base:
        return None
    for i in range(j, k):
        if instrs[i].target is not None or instrs[i].opcode in _TERMINAL or \
                (i > j and instrs[i].offset in targets):
            return None
    if instrs[k].offset in targets:
        return None
    names = info.code.co_names
    i, null = j, False
    if instrs[i].opcode == _PUSH_NULL:
        null, i = True, i + 1
    if i >= k:
        return None
    root = instrs[i]
    if root.opcode == _LOAD_GLOBAL:
        if root.arg & 1:
            if null:
                return None
            null = True
        scope, dotted = "global", [names[root.arg >> 1]]
    elif root.opcode == _LOAD_NAME:
        scope, dotted = "name", [names[root.arg]]
    else:
        return None
    i += 1
    while i < k and instrs[i].opcode == _LOAD_ATTR:
        dotted.append(names[instrs[i].arg])
        i += 1
    method = False
    if i < k and instrs[i].opcode == _LOAD_METHOD and not null:
        dotted.append(names[instrs[i].arg])
        method, i = True, i + 1
    if i == k:
        return None if (null or method) else ("value", scope, tuple(dotted))
    if not (null or method):
        return None
    # A call: ARGS, [KW_NAMES], PRECALL n, CALL n right before BEFORE_WITH; the
    # arguments never reach below the callable's two slots.
    call, pre = instrs[k - 1], instrs[k - 2] if k >= 2 else None
    if call.opcode != _CALL or pre is None or pre.opcode != _PRECALL or pre.arg != call.arg:
        return None
    if depths[i] != base + 2 or depths[k - 2] != base + 2 + pre.arg:
        return None
    if any(depths[x] is None or depths[x] < base + 2 for x in range(i, k - 1)):
        return None
    return ("call", scope, tuple(dotted))
