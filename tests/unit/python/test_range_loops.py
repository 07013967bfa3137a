"""bytecode/range_loops.py: where a `for ... in range(...)` loop's range began,
read from the loop's bytecode (the report's iteration count on CPython 3.12+,
whose range iterators keep only what is left)."""
import types

import pytest

from _portal.bytecode import codemap
from _portal.bytecode.range_loops import range_start
from _portal.run.instrument import compile_user_source


def starts(source, instrumented=False):
    """{line of each for loop: range_start of its FOR_ITER}, every code object."""
    code = compile_user_source(source, "r.py") if instrumented else compile(source, "r.py", "exec")
    out = {}

    def walk(co):
        lines = {start: line for start, end, line in co.co_lines() for start in range(start, end, 2)}
        for ins in codemap.instructions(co):
            if ins.opname == "FOR_ITER":
                out[lines[ins.op_offset]] = range_start(co, ins.offset)
        for c in co.co_consts:
            if isinstance(c, types.CodeType):
                walk(c)
    walk(code)
    return out


SOURCE = """\
for i in range(5): pass
for i in range(1, n): pass
for i in range(2, n, 3): pass
for i in range(-1, n): pass
for i in range(a, n): pass
for i in range(1 + a, n): pass
for i in range(True, n): pass
for i in rng(4): pass
for i in items: pass
def f(n, x):
    for i in range(len(n)): pass
    for i in range(3, n): pass
    for i in range(n + 1 if n else 2): pass
    for i in x.range(3): pass
    for i in enumerate(range(3)): pass
def g(range):
    for i in range(3): pass
"""

EXPECTED = {
    1: ("name", 0), 2: ("name", 1), 3: ("name", 2), 4: ("name", -1),
    5: None,        # the start is a variable
    6: None,        # computed at run time
    7: None,        # a bool, not an int literal
    8: None, 9: None,
    11: ("global", 0), 12: ("global", 3),
    13: None,       # a conditional expression: not straight-line code
    14: None,       # an attribute called range
    15: None,       # enumerate counts on its own
    17: None,       # a local called range
}


@pytest.mark.parametrize("instrumented", [False, True], ids=["plain", "instrumented"])
def test_the_start_is_read_where_the_code_says_it_plainly(instrumented):
    assert starts(SOURCE, instrumented) == EXPECTED


def test_a_continuation_line_header():
    got = starts("for i in range(\n        4,\n        n):\n    pass\n", instrumented=True)
    assert list(got.values()) == [("name", 4)]


def test_not_a_for_iter_offset():
    code = compile("for i in range(3): pass\n", "r.py", "exec")
    assert range_start(code, 0) is None


def test_the_loop_around_an_offset_is_found_by_its_iterator_slot():
    from _portal.bytecode.range_loops import enclosing_for_iter
    code = compile_user_source("""\
def f(loader, n):
    for a in range(3):
        pass
    for epoch in range(1, n):
        for batch in loader:
            pass
""", "r.py")
    code = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    fors = [ins for ins in codemap.instructions(code) if ins.opname == "FOR_ITER"]
    assert len(fors) == 3
    _, epoch, batch = fors
    # the batch loop's FOR_ITER lies in the epoch loop, whose iterator is slot 0
    assert enclosing_for_iter(code, batch.offset, 0) == epoch.offset
    assert range_start(code, enclosing_for_iter(code, batch.offset, 0)) == ("global", 1)
    assert enclosing_for_iter(code, batch.offset, 1) == batch.offset
    assert enclosing_for_iter(code, batch.offset, 2) is None
    assert enclosing_for_iter(code, fors[0].offset - 2, 0) is None
