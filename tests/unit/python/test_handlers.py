"""Tests of _portal.handlers: the program's own `except` clause is evaluated in its
frame, whose variables are read without writing or keeping anything."""
import inspect
import sys

from _portal import handlers


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
