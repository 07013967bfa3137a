"""What a suspend message says about a comprehension the error came from.

In CPython 3.11 a list, set or dict comprehension and a generator expression
are functions of their own (`<listcomp>` ...), called from the expression that
contains them.  Their loop is not a statement: the instrumenter, which wraps
loop bodies in `try` at the source level (instrument.py), has no body to wrap,
and a `try` cannot be written inside an expression.  Resuming at the item of a
comprehension would need its code object rewritten at the bytecode level (an
exception-table entry over the loop body and a handler calling the rescue,
plus a capture of its frame: its hidden `.0` iterator and the partial result on
its stack) — zero cost at run time, as exception tables are, but not done.  So
an error inside one is rescued at the loop statement around it, which runs its
iteration again from the start, the comprehension with it; passed_over() says
so in the suspend message.
"""

KINDS = {"<listcomp>": "a list comprehension", "<setcomp>": "a set comprehension",
         "<dictcomp>": "a dict comprehension", "<genexpr>": "a generator expression"}


def passed_over(exc, loop_frame, is_user_file):
    """The message line for the innermost comprehension of the user's code that
    the error passed through inside the loop, or None."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame is not loop_frame:
        tb = tb.tb_next
    found = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name in KINDS and is_user_file(code.co_filename):
            found = (code, tb.tb_lineno)
        tb = tb.tb_next
    if found is None:
        return None
    code, line = found
    return (f"the error came from inside {KINDS[code.co_name]} at {code.co_filename}:{line}, which "
            f"Portal cannot resume at its item (its loop is inside an expression, which cannot be "
            f"wrapped): its partial result is dropped and it runs again whole, with the loop's iteration")
