"""Would a handler of the user's own take this exception?

Portal must not intervene when the program itself handles an out-of-memory error
(`try: ... except MemoryError: ...` around a loop, or in a caller).  From the
point where the rescue was called, this follows the exception's path through the
exception tables of the loop's frame and of its callers, exactly as the
interpreter will: Portal's own loop wrappers, `finally` blocks, `with` exits and
the implicit clean-up handlers re-raise and are passed through; an `except` whose
type matches (evaluated in the frame, as the interpreter would) or a bare
`except:` takes the exception.
"""
import builtins
import dis

from _portal import RESCUE_NAME as _RESCUE   # the builtin the instrumenter's handlers call
from _portal.bytecode import codemap, frame_locals
from _portal.bytecode.tables import T as _BYTECODE

# Loads of a frame's variable by name (the version's: bytecode/tables.py).
_VARIABLE_LOADS = _BYTECODE.VARIABLE_LOADS


def _instructions(code):
    # EXTENDED_ARG is a prefix whose argument dis already folds into the next
    # instruction's: left out, so that a clause whose first load needs one (a
    # function of more than 128 names: LOAD_GLOBAL's argument is twice the name's
    # index) reads as any other, not as a clause Portal cannot evaluate.
    return {ins.offset: ins for ins in dis.get_instructions(code) if ins.opname != "EXTENDED_ARG"}


def _handler_at(code, offset):
    for entry in codemap.parse_exception_table(code):
        if entry.start <= offset < entry.end:
            return entry.target
    return None


def _following(instrs, offset, count):
    out = []
    keys = sorted(k for k in instrs if k >= offset)
    for k in keys[:count]:
        out.append(instrs[k])
    return out


def _evaluate_types(frame, instrs):
    """Evaluate the loads that build the `except` clause's type (names, attributes,
    tuples) in `frame`; None when they are anything else.  The frame's variables
    are read in place (frame_locals.py): nothing of the program's is written or kept."""
    stack = []
    variables = None     # the frame's variables, read at the first load that needs them
    for ins in instrs:
        op = ins.opname
        if op in _VARIABLE_LOADS or op == "LOAD_NAME":
            if variables is None:
                variables = frame_locals.snapshot(frame)
        if op in ("LOAD_GLOBAL", "LOAD_NAME"):
            name = ins.argval
            if op == "LOAD_NAME" and name in variables:
                stack.append(variables[name])
            elif name in frame.f_globals:
                stack.append(frame.f_globals[name])
            elif hasattr(builtins, name):
                stack.append(getattr(builtins, name))
            else:
                return None
        elif op in _VARIABLE_LOADS:
            # one instruction may load two (its argval names both)
            names = ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)
            for name in names:
                if name not in variables:
                    return None
                stack.append(variables[name])
        elif op == "LOAD_ATTR":
            if not stack:
                return None
            try:
                stack.append(getattr(stack.pop(), ins.argval))
            except Exception:
                return None
        elif op == "BUILD_TUPLE":
            n = ins.argval
            if len(stack) < n:
                return None
            items = tuple(stack[len(stack) - n:])
            del stack[len(stack) - n:]
            stack.append(items)
        elif op in ("PUSH_NULL", "CACHE", "NOP"):
            continue
        elif op == "CHECK_EXC_MATCH":
            return stack[-1] if stack else None
        else:
            return None
    return None


def _classify(frame, code, instrs, target, exc):
    """('take', (where, matches)) | ('pass', offset to continue from) for the handler at target."""
    first = _following(instrs, target, 24)
    if not first:
        return "pass", target
    names = [i.opname for i in first]
    if names[0] != "PUSH_EXC_INFO":
        # The implicit clean-up (COPY 3; POP_EXCEPT; RERAISE 1): re-raised from its RERAISE.
        reraise = next((i.offset for i in first if i.opname == "RERAISE"), target)
        return "pass", reraise
    body = first[1:]
    target = first[1].offset  # the handler's body is covered by its clean-up entry
    if any(i.opname in ("LOAD_GLOBAL", "LOAD_NAME") and i.argval == _RESCUE for i in body[:12]):
        return "pass", target  # Portal's own wrapper of an outer loop
    if body and body[0].opname == "WITH_EXCEPT_START":
        return "pass", target  # a with-block's __exit__
    if "CHECK_EXC_MATCH" in names:
        upto = names.index("CHECK_EXC_MATCH")
        types = _evaluate_types(frame, first[1:upto + 1])
        where = _at(code, first[1].positions.lineno or frame.f_lineno)
        if types is None:
            return "take", (where, False)  # cannot tell: leave the program to itself
        try:
            if isinstance(exc, types):
                return "take", (where, True)
        except TypeError:
            return "take", (where, False)
        return "pass", target
    if body and body[0].opname == "POP_TOP":
        line = body[0].positions.lineno or frame.f_lineno
        return "take", (_at(code, line), True)  # a bare `except:`
    return "pass", target  # a finally block: it re-raises


def _at(code, line):
    return code.co_filename if line is None else f"{code.co_filename}:{line}"


def user_handler_taking(loop_frame, exc):
    """'file:line' of the user's handler that will take `exc`, or None."""
    found = handler_taking(loop_frame, exc)
    return found[0] if found else None


def handler_taking(loop_frame, exc):
    """('file:line', matches) of the user's handler that will take `exc`, or None;
    matches is False where its except clause could not be evaluated (taken, to
    leave the program to itself)."""
    frame = loop_frame
    offset = frame.f_lasti
    seen = set()
    while frame is not None:
        code = frame.f_code
        if (id(frame), offset) in seen:
            return None
        seen.add((id(frame), offset))
        instrs = _instructions(code)
        target = _handler_at(code, offset)
        if target is None:
            frame = frame.f_back
            offset = frame.f_lasti if frame is not None else 0
            continue
        verdict, value = _classify(frame, code, instrs, target, exc)
        if verdict == "take":
            return value
        offset = value
    return None


def wrapped_loop_lines(code, offset):
    """The lines of the loops Portal wrapped (instrument.py) whose body holds the
    instruction at `offset` of `code`, innermost first: the handlers an error
    raised there passes through, followed as the interpreter follows them (a
    handler's own body is covered by its clean-up entry, whose re-raise is covered
    by the enclosing block's)."""
    instrs = _instructions(code)
    lines, seen = [], set()
    while offset not in seen:
        seen.add(offset)
        target = _handler_at(code, offset)
        if target is None:
            break
        first = _following(instrs, target, 24)
        if not first:
            break
        if first[0].opname != "PUSH_EXC_INFO":
            offset = next((i.offset for i in first if i.opname == "RERAISE"), target)
            continue
        body = first[1:]
        for k, ins in enumerate(body[:12]):
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and ins.argval == _RESCUE:
                line = body[k + 1] if k + 1 < len(body) else None
                # the loop's line: LOAD_CONST (3.14: LOAD_SMALL_INT below 256)
                if line is not None and line.opname in ("LOAD_CONST", "LOAD_SMALL_INT") \
                        and isinstance(line.argval, int):
                    lines.append(line.argval)
                break
        offset = first[1].offset if len(first) > 1 else target
    return lines
