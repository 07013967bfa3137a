"""The vocabulary of the bytecode layer: its errors and the records it returns.

Version-neutral: every field means the same on each CPython version the layer
knows; where a version computes it differently, the difference is in the version
tables (v311.py, v313.py) and the module that uses them.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

from _portal import RESCUE_NAME  # noqa: F401 - the layer's vocabulary: the builtin the handlers call


class NotResumable(Exception):
    """The code has no usable resume point here; `reason` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class CodeMapError(Exception):
    """The bytecode contradicts this layer's model of the running CPython."""


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
    kind: str                   # 'call' (3.11: PRECALL/CALL, KW_NAMES before them or
                                # not; 3.13: CALL or CALL_KW), 'call_ex'
                                # (CALL_FUNCTION_EX), 'for_iter'
    resume_offset: int          # where to resume the caller (3.11: KW_NAMES/PRECALL;
                                # 3.13: the CALL/CALL_KW itself; ...)
    call_offset: int            # the CALL/CALL_KW/CALL_FUNCTION_EX/FOR_ITER instruction
    depth: int                  # static depth at resume_offset
    depth_below_call: int       # slots of the frame's stack not used by the call
    nargs: int                  # 'call': arguments (positional + keyword values)
    kw_names: Tuple[str, ...]   # 'call': keyword names (empty when none)
    n_slots: int                # slots used by the call: depth - depth_below_call
    has_kwargs: bool            # 'call': keyword arguments; 'call_ex': a **kwargs dict


class WithSite(NamedTuple):
    before_with: int            # offset of the BEFORE_WITH
    suppress_jump: int          # offset of the handler's conditional jump taken
                                # when __exit__ returns true (3.11:
                                # POP_JUMP_FORWARD_IF_TRUE; 3.13: POP_JUMP_IF_TRUE)
    # How the manager is made, when the code says it plainly, else None:
    # (how, scope, names): how 'call' (`NAMES(...)`) or 'value' (`with NAMES:`),
    # scope 'global' (LOAD_GLOBAL: globals, then builtins) or 'name' (LOAD_NAME,
    # module level), names the dotted name (('torch', 'autocast')).
    manager: Optional[Tuple[str, str, Tuple[str, ...]]]
