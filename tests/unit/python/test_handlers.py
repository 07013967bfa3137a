"""Tests of _portal.rescue.handlers: the program's own `except` clause is evaluated in its
frame, whose variables are read without writing or keeping anything."""
import inspect
import sys

from _portal.rescue import handlers


def _line_of(function, text):
    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _where(function, text):
    return f"{function.__code__.co_filename}:{_line_of(function, text)}"


def local_types(exc):
    errors = (KeyError, MemoryError)
    held = locals()                 # 3.11: the frame's own dict; 3.13: a copy
    before = dict(held)
    try:
        where = handlers.user_handler_taking(sys._getframe(), exc)
    except errors:                  # the clause
        raise AssertionError("not reached")
    return where, held == before


def two_local_types(exc):
    first, second = KeyError, MemoryError
    try:
        return handlers.user_handler_taking(sys._getframe(), exc)
    except (first, second):         # the clause
        raise AssertionError("not reached")


def cell_type(exc):
    kind = MemoryError

    def uses():
        return kind

    try:
        return handlers.user_handler_taking(sys._getframe(), exc), uses
    except kind:                    # the clause
        raise AssertionError("not reached")


def test_an_except_clause_naming_a_local_is_evaluated_in_the_frame():
    where, unchanged = local_types(MemoryError("fake"))
    assert where == _where(local_types, "except errors:")
    assert unchanged                # the program's locals() dict is as it was


def test_a_tuple_of_locals_is_evaluated_in_the_frame():
    assert two_local_types(MemoryError("fake")) == _where(two_local_types, "except (first, second):")


def test_a_cell_variable_is_evaluated_in_the_frame():
    assert cell_type(MemoryError("fake"))[0] == _where(cell_type, "except kind:")


def test_a_clause_that_does_not_match_is_passed():
    where, _ = local_types(ValueError("other"))
    assert where != _where(local_types, "except errors:")


# A function that reads more than 128 names before its `except` (timm's train.py
# main(): some 150 options of args and modules): LOAD_GLOBAL's argument is twice
# the name's index, so the clause's first load needs an EXTENDED_ARG prefix.
_MANY_NAMES = """
def many_names(options, exc, taking):
    summary = [{reads}]
    try:
        return taking(sys._getframe(), exc), summary
    except KeyboardInterrupt:       # the clause
        raise AssertionError("not reached")
"""


def _many_names():
    reads = ", ".join(f"options.opt{i}" for i in range(140))
    namespace = {"sys": sys}
    exec(compile(_MANY_NAMES.format(reads=reads), "<many_names>", "exec"), namespace)
    function = namespace["many_names"]
    import dis
    [clause] = [i for i in dis.get_instructions(function) if i.argval == "KeyboardInterrupt"]
    before = [i for i in dis.get_instructions(function) if i.offset == clause.offset - 2]
    assert before and before[0].opname == "EXTENDED_ARG"   # the case this tests
    import types
    options = types.SimpleNamespace(**{f"opt{i}": i for i in range(140)})
    return function, options


def test_a_clause_whose_load_has_an_extended_arg_is_evaluated():
    """It does not match a MemoryError: passed, not taken for a clause Portal
    cannot read (then an error of the loop inside was left to the program, which
    died of it with `portal: not rescued: ... outside any loop`)."""
    function, options = _many_names()
    passed = function(options, MemoryError("fake"), handlers.user_handler_taking)[0]
    assert not (passed or "").startswith("<many_names>:")   # (pytest's own handlers further out may take it)
    where = function(options, KeyboardInterrupt(), handlers.user_handler_taking)[0]
    assert where == "<many_names>:6"
