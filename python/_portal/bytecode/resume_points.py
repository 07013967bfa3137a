"""Resume points: where a frame can be continued, found from its bytecode.

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
  must be resumed, and which of its stack slots belong to the call (the call
  protocol is the version's: tables.T.CALL_PROTOCOL).
* `with_sites(code)`: each `with` statement's BEFORE_WITH, the jump its handler
  takes when `__exit__` returns true (the error swallowed), and how its manager
  is made (`torch.autocast(...)`, a global `lock`).
"""
from __future__ import annotations

import types
from typing import Dict, List, Optional, Set, Tuple

from _portal.bytecode import stack
from _portal.bytecode.decode import CODE_UNIT, Info, info as _info
from _portal.bytecode.model import (CallSite, CodeMapError, LoopSite, NotResumable,
                                    RESCUE_NAME, WithSite)
from _portal.bytecode.tables import T

# A while loop's body span, the rescue call's second argument: (line, col,
# end_line, end_col).
_SPAN_FIELDS = 4


# --------------------------------------------------------------------------
# the rescue calls

def _rescue_calls(info: Info, loop_line: int) -> List[Tuple[int, int]]:
    """(index of the LOAD of __portal_rescue__, index of its CALL) per call site."""
    if info.rescue is None:
        info.rescue = _scan_rescue_calls(info)
    return info.rescue.get(loop_line, [])


def rescue_lines(code: types.CodeType) -> List[int]:
    """The loop lines of every __portal_rescue__(LOOP_LINE, ...) call in `code`
    (find_loop's `loop_line`), in the version's call shape."""
    info = _info(code)
    if info.rescue is None:
        info.rescue = _scan_rescue_calls(info)
    return sorted(info.rescue)


def _const_args(info: Info, load_k: int) -> int:
    """Index of the first argument of the call whose callable index load_k loads:
    3.13's module level pushes the NULL after LOAD_NAME (3.11's before it)."""
    j = load_k + 1
    if j < len(info.instrs) and info.instrs[j].opname == "PUSH_NULL":
        j += 1
    return j


def _scan_rescue_calls(info: Info) -> Dict[int, List[Tuple[int, int]]]:
    code = info.code
    out: Dict[int, List[Tuple[int, int]]] = {}
    if RESCUE_NAME not in code.co_names:
        return out
    instrs = info.instrs
    n = len(instrs)
    seq = T.CALL_SEQUENCE
    for k, ins in enumerate(instrs):
        if ins.opname == "LOAD_GLOBAL":
            name = code.co_names[T.global_name(ins.arg)]
        elif ins.opname == "LOAD_NAME":
            name = code.co_names[ins.arg]
        else:
            continue
        if name != RESCUE_NAME:
            continue
        j = _const_args(info, k)
        if j >= n:
            continue
        is_constant, value = T.constant(code, instrs[j])
        if not is_constant or type(value) is not int:
            continue
        while j < n and instrs[j].opname in T.CONSTANT_LOADS:
            j += 1
        if j + len(seq) <= n and all(instrs[j + i].opname == s for i, s in enumerate(seq)):
            out.setdefault(value, []).append((k, j + len(seq) - 1))
    return out


def _handler_of_call(info: Info, k: int) -> int:
    """Index of the handler start (PUSH_EXC_INFO) whose code reaches index k."""
    preds = info.predecessors()
    seen = {k}
    work = [k]
    found = set()
    while work:
        i = work.pop()
        if info.instrs[i].opname == "PUSH_EXC_INFO":
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


# --------------------------------------------------------------------------
# loops

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


def _loop_site(info: Info, loop_line: int, load_k: int, call_k: int) -> LoopSite:
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
    dlist = stack.depths(info)
    span = _body_span(info, load_k, call_k)
    if span is not None:
        return _while_site(info, loop_line, call_k, handler, depth, nested, k, span)._replace(
            lasti=lasti)
    # The body may begin with NOPs that no entry covers (the `try` line's NOP):
    # include them, but never step back over a jump target (a while loop's head).
    targets = info.jump_targets()
    while (instrs[k].offset not in targets and k > 0
           and instrs[k - 1].opname == "NOP" and dlist[k - 1] == depth
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
           and instrs[j].target is None and instrs[j].opcode not in T.TERMINAL
           and instrs[j].offset not in targets):
        j -= 1
    if (j >= 0 and instrs[j].opname == "FOR_ITER" and dlist[j] == depth
            and _for_iter_of(info, instrs[j], loop_line, body_start)):
        is_for = True
        for_iter = instrs[j].offset
    kinds = stack.kinds(info)[k]
    kinds = tuple(kinds[:depth]) if kinds is not None else ("unknown",) * depth
    loop_kind = "for" if is_for else "while"
    if not is_for and kinds and kinds[-1] == "aiter":
        loop_kind = "async_for"
    return LoopSite(
        loop_line=loop_line, handler=handler, depth=depth, body_start=body_start,
        is_for=is_for, iter_slot=depth - 1 if is_for else None, for_iter=for_iter,
        stack_kinds=kinds, rescue_call=instrs[call_k].offset, loop_kind=loop_kind, lasti=lasti)


def _for_iter_of(info: Info, for_iter, loop_line: int, body_start: int) -> bool:
    """Is this FOR_ITER the loop's own?  3.11 puts it on the `for` line; 3.13 on the
    iterable's (a continuation line of the header, before the body's first line)."""
    line = info.line_of(for_iter.op_offset)
    if line is None:
        return False
    last = info.line_of(body_start)
    return line == loop_line or (last is not None and loop_line < line <= last)


def _body_span(info: Info, load_k: int, call_k: int):
    """The rescue call's second argument, a while loop's body span, or None."""
    j = _const_args(info, load_k) + 1       # the argument after the loop's line
    if j >= call_k:
        return None
    is_constant, value = T.constant(info.code, info.instrs[j])
    if not is_constant:
        return None
    if (type(value) is tuple and len(value) == _SPAN_FIELDS
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
    k = info.owner(offset - offset % CODE_UNIT)
    pos = info.positions()[info.instrs[k].offset // CODE_UNIT]
    return _in_span(pos, site.body_span)


def _while_site(info: Info, loop_line: int, call_k: int, handler: int, depth: int,
                nested: Set[int], k: int, span) -> LoopSite:
    """A while statement wrapped whole: the try covers the loop head (the
    condition), the body, the condition at the bottom and the else clause.  The
    body starts at its first instruction in layout order (the target of the
    bottom test's backward jump; with `while True` the instruction after the
    head's NOP)."""
    instrs = info.instrs
    positions = info.positions()
    dlist = stack.depths(info)
    h_k = info.idx(handler)
    body_k = None
    for j in range(k, h_k):
        if _in_span(positions[instrs[j].offset // CODE_UNIT], span) and dlist[j] is not None:
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
    kinds = stack.kinds(info)[body_k]
    kinds = tuple(kinds[:depth]) if kinds is not None else ("unknown",) * depth
    return LoopSite(
        loop_line=loop_line, handler=handler, depth=depth, body_start=body_start,
        is_for=False, iter_slot=None, for_iter=None, stack_kinds=kinds,
        rescue_call=instrs[call_k].offset, loop_kind="while", body_span=tuple(span))


# --------------------------------------------------------------------------
# callers

# Slots of a call below its arguments: 3.11 and 3.12 [NULL, callable] or [method,
# self]; 3.13 [callable, self_or_null].
_CALLABLE_SLOTS = 2
# CALL_FUNCTION_EX: the two callable slots, the args tuple, then the kwargs dict's
# slot where the version has one (tables.T.call_ex_kwargs_slot: 3.11/3.13 oparg & 1;
# 3.14 always, NULL when there are none).
_CALL_EX_SLOTS = 3
# 3.13's CALL_KW: the keyword names' tuple on top of the arguments.
_KW_NAMES_SLOT = 1


def call_site(code: types.CodeType, lasti: int) -> CallSite:
    """Where to resume a caller frame whose `f_lasti` is `lasti`, mid-call.

    3.11: an inlined Python-to-Python call leaves f_lasti on the last CACHE entry
    of CALL; a call made through C leaves it on CALL or on PRECALL (specialised
    PRECALLs call builtins themselves). The resume point is the PRECALL, or the
    KW_NAMES before it (KW_NAMES keeps the keyword names in a C local that must
    be set again).  3.12: the same without PRECALL: the CALL, or the KW_NAMES
    before it.  3.13: f_lasti is on the CALL or CALL_KW (instr_ptr is the
    running instruction), whose operands are all on the stack (the keyword
    names' tuple too): the call instruction is the resume point.

    `f(*a, **k)` resumes at its CALL_FUNCTION_EX, with its operands still on the
    stack. A frame that drives a generator from a for-loop is at FOR_ITER
    ('for_iter', the iterator being the one slot of the call).  Anything else (a
    call made by an operator, an attribute access, ...) raises NotResumable.
    """
    info = _info(code)
    if lasti % CODE_UNIT:
        raise ValueError(f"offset {lasti} is odd")
    k = info.owner(lasti)
    ins = info.instrs[k]
    dlist = stack.depths(info)
    if ins.opname == "CALL_FUNCTION_EX":
        d = _reachable(info, dlist, k)
        kwargs = T.call_ex_kwargs_slot(ins.arg)
        n = _CALL_EX_SLOTS + kwargs
        return CallSite("call_ex", ins.offset, ins.offset, d, d - n, 0, (), n, kwargs)
    if ins.opname == "FOR_ITER":
        d = _reachable(info, dlist, k)
        return CallSite("for_iter", ins.offset, ins.offset, d, d - 1, 0, (), 1, False)
    if T.CALL_PROTOCOL in ("precall", "kw_names"):
        site = _call_site_kw_names(info, dlist, k)
    else:
        site = _call_site_call_kw(info, dlist, k)
    if site is None:
        raise NotResumable(f"{code.co_name} is in {ins.opname} at offset {ins.offset}, "
                           f"not in a call it can be resumed at")
    return site


def _reachable(info: Info, dlist, k: int) -> int:
    d = dlist[k]
    if d is None:
        raise NotResumable(f"offset {info.instrs[k].offset} is unreachable")
    return d


def _call_site_kw_names(info: Info, dlist, k: int) -> Optional[CallSite]:
    """3.11: PRECALL n, CALL n; 3.12: CALL n alone (T.CALL_SEQUENCE); KW_NAMES
    before them for keyword arguments."""
    code = info.code
    ins = info.instrs[k]
    first = T.CALL_SEQUENCE[0]
    if ins.opname == "CALL" and first == "PRECALL":
        if k == 0 or info.instrs[k - 1].opname != "PRECALL":
            raise CodeMapError(f"CALL at {ins.offset} without PRECALL")
        call_k = k
        k -= 1
    elif ins.opname == first:
        call_k = k + len(T.CALL_SEQUENCE) - 1
    else:
        return None
    pre = info.instrs[k]
    nargs = pre.arg
    kw_names: Tuple[str, ...] = ()
    if k > 0 and info.instrs[k - 1].opname == "KW_NAMES":
        k -= 1
        kw_names = tuple(code.co_consts[info.instrs[k].arg])
    d = _reachable(info, dlist, k)
    n = nargs + _CALLABLE_SLOTS
    if d < n:
        raise CodeMapError(f"depth {d} below the {n} slots of the call at "
                           f"{pre.offset}")
    return CallSite("call", info.instrs[k].offset, info.instrs[call_k].offset, d,
                    d - n, nargs, kw_names, n, bool(kw_names))


def _call_site_call_kw(info: Info, dlist, k: int) -> Optional[CallSite]:
    """3.13: CALL n over [callable, self_or_null, n args]; CALL_KW n with the
    keyword names' tuple on top, pushed by the LOAD_CONST before it."""
    code = info.code
    ins = info.instrs[k]
    if ins.opname not in ("CALL", "CALL_KW"):
        return None
    nargs = ins.arg
    kw_names: Tuple[str, ...] = ()
    n = nargs + _CALLABLE_SLOTS
    if ins.opname == "CALL_KW":
        prev = info.instrs[k - 1] if k else None
        value = code.co_consts[prev.arg] if prev is not None and prev.opname == "LOAD_CONST" else None
        if type(value) is not tuple or not all(type(v) is str for v in value):
            raise NotResumable(f"the keyword names of the call at {ins.offset} are not "
                               f"a constant")
        kw_names = value
        n += _KW_NAMES_SLOT
    d = _reachable(info, dlist, k)
    if d < n:
        raise CodeMapError(f"depth {d} below the {n} slots of the call at {ins.offset}")
    return CallSite("call", ins.offset, ins.offset, d, d - n, nargs, kw_names, n,
                    ins.opname == "CALL_KW")


# --------------------------------------------------------------------------
# with statements

def with_sites(code: types.CodeType) -> List[WithSite]:
    """The (synchronous) with statements of `code` whose handler has the version's
    shape (tables.T.WITH_HANDLER: PUSH_EXC_INFO, WITH_EXCEPT_START, then the jump
    to the "swallowed" path when __exit__ returns true), in the table entry that
    covers the instruction after BEFORE_WITH."""
    return list(withs(_info(code)))


def withs(info: Info) -> Tuple[WithSite, ...]:
    if info.withs is None:
        info.withs = tuple(_find_withs(info))
    return info.withs


def _find_withs(info: Info):
    instrs = info.instrs
    n = len(instrs)
    shape = T.WITH_HANDLER
    enter = T.WITH_ENTER            # 3.11/3.13: BEFORE_WITH; 3.14: COPY 1 ... CALL 0
    for k, ins in enumerate(instrs):
        if ins.opname != enter[0] or k + len(enter) >= n or \
                any(instrs[k + i].opname != s for i, s in enumerate(enter)):
            continue
        e = info.handler[k + len(enter)]
        if e is None:
            continue
        h = info.index.get(e.target)
        if h is None or h + len(shape) > n or \
                any(instrs[h + i].opname != s for i, s in enumerate(shape)):
            continue
        yield WithSite(ins.offset, instrs[h + len(shape) - 1].offset, _manager(info, k))


def _manager(info: Info, k: int):
    """How the manager BEFORE_WITH (index k) takes is made, when it is one of
    `NAME.ATTR...(ARGS)` or `NAME.ATTR...` in straight-line code; else None."""
    instrs = info.instrs
    depths = stack.depths(info)
    if depths[k] is None or depths[k] < 1:
        return None
    base = depths[k] - 1            # below the manager
    targets = info.jump_targets()
    j = k - 1
    while j >= 0 and depths[j] is not None and depths[j] > base:
        j -= 1
    if j < 0 or depths[j] != base:
        return None
    for i in range(j, k):
        if instrs[i].target is not None or instrs[i].opcode in T.TERMINAL or \
                (i > j and instrs[i].offset in targets):
            return None
    if instrs[k].offset in targets:
        return None
    names = info.code.co_names
    i, null = j, False
    if instrs[i].opname == "PUSH_NULL":         # 3.11: the NULL before the callable
        null, i = True, i + 1
    if i >= k:
        return None
    root = instrs[i]
    if root.opname == "LOAD_GLOBAL":
        if T.global_pushes_null(root.arg):
            if null:
                return None
            null = True
        scope, dotted = "global", [names[T.global_name(root.arg)]]
    elif root.opname == "LOAD_NAME":
        scope, dotted = "name", [names[root.arg]]
    else:
        return None
    i += 1
    method = False
    while i < k:
        attr = T.attribute(instrs[i])
        if attr is None:
            break
        index, is_method = attr
        if is_method:
            if null:
                return None
            dotted.append(names[index])
            method, i = True, i + 1
            break
        dotted.append(names[index])
        i += 1
    if i < k and instrs[i].opname == "PUSH_NULL" and not (null or method):
        # 3.13: the NULL after the callable (`LOAD_NAME f; PUSH_NULL` at module level;
        # `module.f(...)` loads the attribute plainly, then PUSH_NULL)
        null, i = True, i + 1
    if i == k:
        return None if (null or method) else ("value", scope, tuple(dotted))
    if not (null or method):
        return None
    # A call: ARGS, then the version's call instructions right before BEFORE_WITH
    # (3.11: [KW_NAMES] PRECALL n, CALL n; 3.12: [KW_NAMES] CALL n; 3.13: CALL n, or LOAD_CONST names,
    # CALL_KW n); the arguments never reach below the callable's two slots.
    call = instrs[k - 1]
    if call.opname not in ("CALL", "CALL_KW"):
        return None
    first = k - len(T.CALL_SEQUENCE)   # 3.11: the PRECALL; 3.13: the call itself
    if first < i:
        return None
    pre = instrs[first]
    if pre.arg != call.arg or (pre is not call and pre.opname != T.CALL_SEQUENCE[0]):
        return None
    above = _CALLABLE_SLOTS + call.arg + (_KW_NAMES_SLOT if call.opname == "CALL_KW" else 0)
    if depths[i] != base + _CALLABLE_SLOTS or depths[first] != base + above:
        return None
    if any(depths[x] is None or depths[x] < base + _CALLABLE_SLOTS for x in range(i, first + 1)):
        return None
    return ("call", scope, tuple(dotted))
