"""comprehensions.passed_over: the comprehension an error came from inside a loop,
whether it has a frame of its own (3.11's <listcomp>, every version's <genexpr>)
or is inlined into the enclosing function (3.12+, PEP 709)."""
import importlib.util
import sys

import pytest

from _portal.fidelity import comprehensions

PROGRAM = '''\
def fail(x):
    if x == 2:
        raise MemoryError("x")
    return x


def run(kind):
    for epoch in range(1):
        if kind == "list":
            got = [fail(x) for x in range(4)]
        elif kind == "set":
            got = {fail(x) for x in range(4)}
        elif kind == "dict":
            got = {x: fail(x) for x in range(4)}
        elif kind == "genexpr":
            got = sum(fail(x) for x in range(4))
        elif kind == "nested":
            got = [[fail(x) for x in range(y, 4)] for y in range(1)]
        else:
            got = [x for x in range(4)]
            fail(2)
    return got
'''
LINES = {"list": 10, "set": 12, "dict": 14, "genexpr": 16, "nested": 18}
KINDS = {"list": "a list comprehension", "set": "a set comprehension",
         "dict": "a dict comprehension", "genexpr": "a generator expression",
         "nested": "a list comprehension"}


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    spec = importlib.util.spec_from_file_location("prog_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    comprehensions._TREES.clear()
    return module, str(path)


def error_of(module, kind):
    try:
        module.run(kind)
    except MemoryError as exc:
        return exc
    raise AssertionError("no error")


def loop_frame_of(exc):
    """The frame of run(), the one holding the loop."""
    tb = exc.__traceback__
    while tb.tb_frame.f_code.co_name != "run":
        tb = tb.tb_next
    return tb.tb_frame


@pytest.mark.parametrize("kind", sorted(LINES))
def test_the_comprehension_is_named_with_its_line(program, kind):
    module, path = program
    exc = error_of(module, kind)
    note = comprehensions.passed_over(exc, loop_frame_of(exc), lambda f: f == path)
    assert note == (f"the error came from inside {KINDS[kind]} at {path}:{LINES[kind]}, which "
                    f"Portal cannot resume at its item (its loop is inside an expression, which "
                    f"cannot be wrapped): its partial result is dropped and it runs again whole, "
                    f"with the loop's iteration")


def test_an_error_beside_a_comprehension_names_none(program):
    module, path = program
    exc = error_of(module, "after")
    assert comprehensions.passed_over(exc, loop_frame_of(exc), lambda f: f == path) is None


def test_a_comprehension_outside_the_users_files_is_not_named(program):
    module, path = program
    exc = error_of(module, "list")
    assert comprehensions.passed_over(exc, loop_frame_of(exc), lambda f: False) is None


def test_inlined_comprehensions_have_no_frame_of_their_own_from_3_12(program):
    """What the inlined path is for: on 3.12+ the list comprehension's loop runs in
    run()'s own frame (the traceback goes from run() straight to fail())."""
    module, path = program
    exc = error_of(module, "list")
    names = []
    tb = exc.__traceback__
    while tb is not None:
        names.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    if sys.version_info >= (3, 12):
        assert names[-2:] == ["run", "fail"]
    else:
        assert names[-3:] == ["run", "<listcomp>", "fail"]
