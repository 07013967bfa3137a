"""The loop handlers' re-raise leaves the frame where python would (CPython 3.11-3.14).

A frame that an exception leaves stops on the instruction it was at: its line is
what `frame.f_lineno` says in the 'return' event of a trace or profile function,
and afterwards on the dead frame (a traceback's tb_frame).  Compiled from the AST,
the instrumenter's handler (instrument.py)::

    PUSH_EXC_INFO; LOAD_GLOBAL Exception; CHECK_EXC_MATCH; POP_JUMP_FORWARD_IF_FALSE NO
    POP_TOP; LOAD_GLOBAL __portal_rescue__; LOAD_CONST...; PRECALL; CALL; POP_TOP
    (LOAD_NAME for both, and PUSH_NULL before the rescue, at module and class level)
    RAISE_VARARGS 0
    NO: RERAISE 0
    CLEANUP: COPY 3; POP_EXCEPT; RERAISE 1          (entered with lasti pushed)

(3.12: POP_JUMP_IF_FALSE; no PRECALL, `CALL n` alone.  3.13 as 3.12, and at module and class level
the PUSH_NULL comes after the LOAD_NAME of the rescue.  3.14: NOT_TAKEN after the
jump, LOAD_SMALL_INT for a small int argument, lasti pushed as a tagged integer.  The version's facts are
read from the bytecode layer's tables: bytecode/tables.py.)

re-raises from its own line-less instructions: the frame ends on them, f_lineno
None.  CPython's `with` statement keeps the line by having the offset of the
raising instruction pushed when its handler is entered (the exception-table
entry's lasti flag) and re-raising with `RERAISE n`, which makes that offset the
frame's last instruction again.  The same is done here, after compile(), for every
handler of that exact shape:

* the entries that lead into the handler get the lasti flag: the stack there is
  [... loop stack, lasti, exc] instead of [... loop stack, exc];
* the handler's clean-up entry keeps one item more (lasti under the saved
  exception state), so its `COPY 3; POP_EXCEPT; RERAISE 1` still finds what it
  expects, and re-raises from the offset it is given, which is now the original;
* `POP_TOP` after the match becomes `NOP` (the exception stays on the stack),
  `RAISE_VARARGS 0` and the no-match `RERAISE 0` become `RERAISE 2`: it takes
  the exception from the top and makes the pushed lasti the frame's instruction;
* co_stacksize grows by what the handler now holds.

Instructions keep their sizes, offsets and (absent) locations: the body's code,
the tracebacks, the 'line' and 'exception' events are untouched.  A handler of any
other shape is left as compiled.
"""
from _portal.bytecode.tables import T
from _portal.bytecode.codetree import rewrite_tree

_OP = T.OPMAP
_CACHES = T.CACHES
_EXTENDED_ARG = _OP["EXTENDED_ARG"]
_PUSH_EXC_INFO = _OP["PUSH_EXC_INFO"]
_LOAD_GLOBAL = _OP["LOAD_GLOBAL"]
_LOAD_NAME = _OP["LOAD_NAME"]
_PUSH_NULL = _OP["PUSH_NULL"]
# The loads of a constant argument (3.14: LOAD_SMALL_INT too, for 0..255).
_CONSTANT_LOADS = frozenset(_OP[name] for name in T.CONSTANT_LOADS)
# 3.14 puts NOT_TAKEN after each conditional jump (a no-op for branch events):
# left out of the instruction list, so the handler has 3.13's shape.
_NOT_TAKEN = _OP.get("NOT_TAKEN")
_CHECK_EXC_MATCH = _OP["CHECK_EXC_MATCH"]
# The match's jump to the no-match RERAISE (3.11: POP_JUMP_FORWARD_IF_FALSE).
_POP_JUMP_IF_FALSE = _OP[T.JUMP_IF_FALSE]
_POP_TOP = _OP["POP_TOP"]
# The rescue call's instructions after its arguments, each with the argument count.
_CALL_SEQUENCE = tuple(_OP[name] for name in T.CALL_SEQUENCE)
# Where the NULL under (3.11, 3.12) or over (3.13) the rescue callable is pushed at module level.
_NULL_BEFORE_NAME = T.CALL_PROTOCOL in ("precall", "kw_names")
_RAISE_VARARGS = _OP["RAISE_VARARGS"]
_RERAISE = _OP["RERAISE"]
_COPY = _OP["COPY"]
_POP_EXCEPT = _OP["POP_EXCEPT"]
_NOP = _OP["NOP"]
_JUMP_BACKWARD = _OP["JUMP_BACKWARD"]
# 3.13 tests a condition's value with TO_BOOL before the jump (3.11 has none).
_TO_BOOL = _OP.get("TO_BOOL")

# RERAISE's operand: the pushed lasti is this many items below the exception
# ([lasti, saved exception state, exception]).
_RERAISE_WITH_LASTI = 2
# A skipped item's way back to the loop (instrument.py's `continue`), in the room
# the compiler gave `ROOM; POP_TOP; POP_EXCEPT`: drop the exception, restore the
# saved exception state, drop the pushed lasti.
_SKIP_EXIT = bytes((_OP["POP_TOP"], 0, _OP["POP_EXCEPT"], 0, _OP["POP_TOP"], 0))
# What the handler holds above the loop's stack at most: lasti, the saved
# exception state, the exception, NULL and the rescue callable (its arguments on top).
_HANDLER_ITEMS = 5

_ENTRY_START = 0x80      # marks the first byte of an exception-table entry
_MORE = 0x40             # another 6-bit group follows
_BITS = 6


# --- the exception table (Objects/exception_handling_notes.txt) -------------------

def parse_table(raw):
    """[[start, end, target, depth, lasti]] in byte offsets."""
    entries, i = [], 0

    def varint():
        nonlocal i
        b = raw[i]
        i += 1
        value = b & 63
        while b & _MORE:
            b = raw[i]
            i += 1
            value = (value << _BITS) | (b & 63)
        return value
    while i < len(raw):
        start = varint() * 2
        end = start + varint() * 2
        target = varint() * 2
        depth_lasti = varint()
        entries.append([start, end, target, depth_lasti >> 1, bool(depth_lasti & 1)])
    return entries


def encode_table(entries):
    out = bytearray()

    def varint(value, first):
        groups = [value & 63]
        value >>= _BITS
        while value:
            groups.append(value & 63)
            value >>= _BITS
        groups.reverse()
        for n, g in enumerate(groups):
            out.append(g | (_MORE if n < len(groups) - 1 else 0) | (_ENTRY_START if first and n == 0 else 0))
    for start, end, target, depth, lasti in entries:
        varint(start // 2, True)
        varint((end - start) // 2, False)
        varint(target // 2, False)
        varint((depth << 1) | int(lasti), False)
    return bytes(out)


# --- instructions -------------------------------------------------------------------

def _instructions(co_code):
    """[(offset of the opcode, opcode, full argument)], caches and NOT_TAKEN skipped."""
    out, i, ext = [], 0, 0
    while i < len(co_code):
        op, arg = co_code[i], co_code[i + 1] | ext
        if op == _EXTENDED_ARG:
            ext = arg << 8
            i += 2
            continue
        ext = 0
        if op != _NOT_TAKEN:
            out.append((i, op, arg))
        i += 2 + 2 * _CACHES[op]
    return out


def _name_loaded(instr, names):
    """The name a LOAD_GLOBAL (function) or LOAD_NAME (module, class body) loads."""
    _, op, arg = instr
    if op == _LOAD_GLOBAL:
        return names[arg >> 1]
    if op == _LOAD_NAME:
        return names[arg]
    return None


def _handler_at(instrs, k, names, rescue_name):
    """If instrs[k] loads __portal_rescue__ inside the instrumenter's handler,
    (offset of PUSH_EXC_INFO, of the POP_TOP after the match, of RAISE_VARARGS, of
    the no-match RERAISE, number of call arguments); else None."""
    if _name_loaded(instrs[k], names) != rescue_name:
        return None
    head = k - 5
    args = k + 1
    if instrs[k][1] == _LOAD_NAME and _NULL_BEFORE_NAME:    # PUSH_NULL; LOAD_NAME rescue
        if k < 1 or instrs[k - 1][1] != _PUSH_NULL:
            return None
        head = k - 6
    elif instrs[k][1] == _LOAD_NAME:                        # LOAD_NAME rescue; PUSH_NULL
        if args >= len(instrs) or instrs[args][1] != _PUSH_NULL:
            return None
        args += 1
    if head < 0:
        return None
    shape = [op for _, op, _ in instrs[head:head + 5]]
    if shape[:1] + shape[2:] != [_PUSH_EXC_INFO, _CHECK_EXC_MATCH, _POP_JUMP_IF_FALSE,
                                 _POP_TOP]:
        return None
    if _name_loaded(instrs[head + 1], names) != "Exception":
        return None
    j = args
    while j < len(instrs) and instrs[j][1] in _CONSTANT_LOADS:
        j += 1
    nargs = j - args
    ncall = len(_CALL_SEQUENCE)
    if nargs < 1 or j + ncall + 2 >= len(instrs):
        return None
    if [(op, arg) for _, op, arg in instrs[j:j + ncall]] != [(op, nargs) for op in _CALL_SEQUENCE]:
        return None
    after = j + ncall                  # what follows the rescue call
    skip_room = None
    cond = after + 1 if _TO_BOOL is not None and instrs[after][1] == _TO_BOOL else after
    if instrs[cond][1] == _POP_JUMP_IF_FALSE:
        # A for loop's `if rescue(...): ROOM; continue`, then `raise` (instrument.py);
        # 3.13 tests the call's value with TO_BOOL first.
        cont = [op for _, op, _ in instrs[cond + 1:cond + 7]]
        if (len(cont) < 6 or _name_loaded(instrs[cond + 1], names) != rescue_name
                or cont[1:] != [_POP_TOP, _POP_EXCEPT, _JUMP_BACKWARD, _RAISE_VARARGS, _RERAISE]
                or instrs[cond + 5][2] != 0 or instrs[cond + 6][2] != 0):
            return None
        cond_off, _, cond_arg = instrs[cond]
        if cond_off + 2 + 2 * _CACHES[_POP_JUMP_IF_FALSE] + 2 * cond_arg != instrs[cond + 5][0]:
            return None
        skip_room = (instrs[cond + 1][0], instrs[cond + 3][0] + 2)   # ROOM .. end of POP_EXCEPT
        raise_k = cond + 5
    elif [(op, arg) for _, op, arg in instrs[after:after + 3]] == [(_POP_TOP, 0), (_RAISE_VARARGS, 0),
                                                                   (_RERAISE, 0)]:
        raise_k = after + 1
    else:
        return None
        return None
    if raise_k + 1 >= len(instrs):
        return None
    no_match = instrs[raise_k + 1][0]
    jump_off, _, jump_arg = instrs[head + 3]
    # a forward jump counts from the end of its caches (3.11's has none)
    if jump_off + 2 + 2 * _CACHES[_POP_JUMP_IF_FALSE] + 2 * jump_arg != no_match:
        return None
    return instrs[head][0], instrs[head + 4][0], instrs[raise_k][0], no_match, nargs, skip_room


def _patch_code(code, rescue_name):
    if rescue_name not in code.co_names:
        return code
    names = code.co_names
    instrs = _instructions(code.co_code)
    by_offset = {off: (op, arg) for off, op, arg in instrs}
    table = parse_table(code.co_exceptiontable)
    co_code = bytearray(code.co_code)
    stacksize = code.co_stacksize
    patched = False
    for k in range(len(instrs)):
        found = _handler_at(instrs, k, names, rescue_name)
        if found is None:
            continue
        start, pop_top, raise_at, no_match, nargs, skip_room = found
        into = [e for e in table if e[2] == start]
        cleanup = [e for e in table if e[0] <= start < e[1]]
        if not into or any(e[4] for e in into) or len({e[3] for e in into}) != 1 or len(cleanup) != 1:
            continue
        depth = into[0][3]
        target = cleanup[0][2]
        cleanup_entries = [e for e in table if e[2] == target]
        if (by_offset.get(target) != (_COPY, 3) or cleanup[0][3] != depth + 1
                or not cleanup[0][4]
                or any(not (start <= e[0] and e[1] <= target) for e in cleanup_entries)):
            continue
        after_copy = target + 2 + 2 * _CACHES[_COPY]
        if by_offset.get(after_copy, (None,))[0] != _POP_EXCEPT \
                or by_offset.get(after_copy + 2) != (_RERAISE, 1):
            continue
        for e in into:
            e[4] = True
        for e in cleanup_entries:
            e[3] = depth + 2
        co_code[pop_top:pop_top + 2] = bytes((_NOP, 0))
        co_code[raise_at:raise_at + 2] = bytes((_RERAISE, _RERAISE_WITH_LASTI))
        co_code[no_match:no_match + 2] = bytes((_RERAISE, _RERAISE_WITH_LASTI))
        if skip_room is not None:
            # The skip's way out keeps the handler's items to drop: the exception
            # (no longer popped after the match), the saved state, the pushed lasti.
            room, end = skip_room
            co_code[room:end] = _SKIP_EXIT + bytes((_NOP, 0)) * ((end - room - len(_SKIP_EXIT)) // 2)
            # The clean-up entry covered the room up to the compiler's POP_EXCEPT:
            # now it covers the first POP_TOP only (past it the handler's items go).
            for e in table:
                if e[0] <= room < e[1] <= end:
                    e[1] = room + 2
        stacksize = max(stacksize, depth + _HANDLER_ITEMS + nargs)
        patched = True
    if not patched:
        return code
    return code.replace(co_code=bytes(co_code), co_exceptiontable=encode_table(table),
                        co_stacksize=stacksize)


def keep_lines(code, rescue_name):
    """`code` (and the code objects in its constants, recursively) with every
    instrumenter's loop handler re-raising from the original instruction."""
    return rewrite_tree(code, lambda c: _patch_code(c, rescue_name))
