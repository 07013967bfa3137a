"""bytecode/carried.py: the variables a failed iteration rebound before the error
that its rerun would read changed (the capture names them: "will differ")."""
import builtins
import sys

import pytest

from _portal.bytecode import codemap
from _portal.run import instrument
from _portal.bytecode import carried
from _portal.run.instrument import compile_user_source


@pytest.fixture
def found(monkeypatch):
    """Runs a program whose loop raises MemoryError at `fail`; the rescue builtin
    records what carried.py finds for the loop the error reached first."""
    seen = []

    def rescue(loop_line, *rest):
        frame = sys._getframe(1)
        exc = sys.exception() if hasattr(sys, "exception") else sys.exc_info()[1]
        tb = exc.__traceback__
        while tb.tb_frame is not frame:
            tb = tb.tb_next
        site = codemap.find_loop(frame.f_code, loop_line, lasti=frame.f_lasti)
        if not seen:
            seen.append([name for name, _ in carried.changed_before(frame.f_code, site, tb.tb_lasti)])
        return False
    monkeypatch.setattr(builtins, instrument.RESCUE_NAME, rescue, raising=False)

    def run(source):
        with pytest.raises(MemoryError):
            exec(compile_user_source(source, "c.py"), {"__name__": "c"})
        return seen[0]
    return run


def test_a_counter_rebound_before_the_error_is_found(found):
    assert found("""
def main():
    n = 0
    for i in range(3):
        n += 1
        if i == 1:
            raise MemoryError
    return n
main()
""") == ["n"]


def test_a_variable_rebound_only_after_the_error_or_before_any_read_is_not(found):
    assert found("""
def main():
    n = 0
    last = None
    for i in range(3):
        last = i * 2            # stored before it is read: the rerun stores it again
        if i == 1:
            raise MemoryError
        n += last               # after the error: not run yet
    return n, last
main()
""") == []


def test_module_level_names_and_globals_are_found(found):
    assert found("""
step = 0
total = 0
for i in range(3):
    step += 1
    if i == 1:
        raise MemoryError
    total += i
""") == ["step"]


def test_a_global_of_a_function(found):
    assert found("""
step = 0
def main():
    global step
    for i in range(3):
        step = step + 1
        if i == 1:
            raise MemoryError
main()
""") == ["step"]


def test_a_while_loops_condition_does_not_count(found):
    assert found("""
def main():
    n = 3
    k = 0
    while n > 0:
        k += 1
        if n == 2:
            raise MemoryError
        n -= 1
main()
""") == ["k"]


# An inlined comprehension (3.12+) binds its variable in the loop's own frame, and
# puts the outer value back itself; on 3.11 it is a function of its own.  Either
# way the rerun reads what the iteration started with.

def test_a_comprehensions_own_variable_is_not_a_change(found):
    assert found("""
def main(data):
    n = 0
    for i in range(3):
        squares = [x * x for x in data]
        pairs = {k: v for k, v in zip(data, data)}
        if i == 1:
            raise MemoryError
        n = n + len(squares) + len(pairs)
    return n
main([1, 2, 3])
""") == []


def test_an_error_inside_a_comprehension_leaves_its_variable_as_it_was(found):
    assert found("""
def boom(x, i):
    if i == 1 and x == 2:
        raise MemoryError
    return x
def main(data):
    for i in range(3):
        kept = [boom(x, i) for x in data]
    return kept
main([1, 2, 3])
""") == []


def test_a_variable_rebound_in_the_body_and_named_in_a_comprehension_is_found(found):
    assert found("""
def main(data):
    x = 0
    for i in range(3):
        x += 1
        ys = [x for x in data]
        if i == 1:
            raise MemoryError
    return x, ys
main([1, 2, 3])
""") == ["x"]


def test_a_counter_bumped_in_a_handler_of_the_body_is_found(found):
    """The handler's entry (PUSH_EXC_INFO) has no source position: it is part of
    a while loop's body all the same."""
    assert found("""
def main():
    step, epoch = 0, 0
    it = iter(range(2))
    while step < 9:
        try:
            batch = next(it)
        except StopIteration:
            epoch += 1
            it = iter(range(2))
            batch = next(it)
        if step == 4:
            raise MemoryError
        step += 1
main()
""") == ["epoch", "it"]


def test_a_handler_the_error_cannot_come_after_is_not_on_the_path(found):
    assert found("""
def main():
    step, skipped = 0, 0
    while step < 9:
        step2 = step
        if step == 4:
            raise MemoryError
        try:
            int("x")
        except ValueError:
            skipped += 1
        step += 1
main()
""") == []
