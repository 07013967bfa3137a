"""A generator's close() behaves as under python where only Portal's handlers enclose the yield.

CPython 3.13's gen.close() of a generator suspended at a `yield` that no try block
of its code encloses does not run the frame at all: it marks the generator done
(no GeneratorExit thrown in, no 'call'/'exception'/'return' events for a trace or
profile function).  The compiler says which yields those are, in the argument of
the RESUME after each (bytecode/tables.py: RESUME_DEPTH1).  The instrumenter's
loop handler (`except Exception:`, instrument.py) puts a try block around every
yield in a loop, so without help close() would throw into frames python skips.

It may be skipped there too, exactly: what close() throws is GeneratorExit, which
`except Exception` never catches, so thrown in it would only pass through Portal's
handlers and leave the frame.  After compile(), a yield whose enclosing handlers,
innermost first, are Portal's up to the generator's own outermost one (the
implicit handler around the whole body, which the compiler does not count) gets
the mark python's compiler gives it.  The instruction keeps its size and offset;
a yield under a try block of the user's own is left as compiled.  CPython 3.11's
close() always throws (no mark): nothing is changed there.
"""
from _portal.run import reraise   # its reading of the instrumenter's handlers, shared
from _portal.bytecode.tables import T
from _portal.bytecode.codetree import rewrite_tree

_DEPTH1 = T.RESUME_DEPTH1
_RESUME = T.OPMAP["RESUME"]
_YIELD_VALUE = T.OPMAP["YIELD_VALUE"]
_AFTER_YIELD = T.RESUME_AFTER_YIELD
_AT_START = 0          # RESUME's argument at the start of a code object
# inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR: the code objects with yields
# that close() (aclose()) ends.
_GENERATOR_FLAGS = 0x20 | 0x200


def _handler_of(table, offset):
    """The handler (target offset) of the innermost try block around `offset`, or None."""
    for start, end, target, _, _ in table:
        if start <= offset < end:
            return target
    return None


def _portal_handlers(instrs, table, names, rescue_name):
    """{start of each instrumenter's handler: the offset its clean-up runs at}: the
    clean-up is where the try block around the handler's own code leads, and the
    handler of the try block around the clean-up is the next one out."""
    handlers = {}
    for k in range(len(instrs)):
        found = reraise._handler_at(instrs, k, names, rescue_name)
        if found is not None:
            cleanup = _handler_of(table, found[0])
            if cleanup is not None:
                handlers[found[0]] = cleanup
    return handlers


def _mark(code, rescue_name):
    if not code.co_flags & _GENERATOR_FLAGS or rescue_name not in code.co_names:
        return code
    instrs = reraise._instructions(code.co_code)
    table = reraise.parse_table(code.co_exceptiontable)
    starts = [off for off, op, arg in instrs if op == _RESUME and arg == _AT_START]
    outermost = _handler_of(table, starts[0]) if starts else None
    if outermost is None:
        return code
    portal = _portal_handlers(instrs, table, code.co_names, rescue_name)
    co_code = None
    for (yield_at, op, _), (resume_at, next_op, arg) in zip(instrs, instrs[1:]):
        if op != _YIELD_VALUE or next_op != _RESUME or arg != _AFTER_YIELD:
            continue
        handler, passed = _handler_of(table, yield_at), 0
        while handler in portal:
            handler, passed = _handler_of(table, portal[handler]), passed + 1
        if passed and handler == outermost:
            co_code = co_code or bytearray(code.co_code)
            co_code[resume_at + 1] = arg | _DEPTH1
    return code if co_code is None else code.replace(co_code=bytes(co_code))


def keep_close(code, rescue_name):
    """`code` (and the code objects in its constants, recursively) with every yield
    that only the instrumenter's handlers enclose marked as python's compiler marks
    it without them.  Run on the compiled code before reraise.keep_lines() (which
    changes the handlers' shape)."""
    if _DEPTH1 is None:
        return code
    return rewrite_tree(code, lambda c: _mark(c, rescue_name))
