"""Portal's wrappers around library functions leave no frame in a traceback.

An import patch (dataloader.py, irreversible.py) replaces a library function by a
Python function that notes something and calls the original.  An error raised
under the original passes through the wrapper's frame, and python's traceback
would show it (`_portal/torch/dataloader.py, in __next__`), which python's own run of
the program does not have.  A wrapper calls the original as

    try:
        return original(...)
    except BaseException as exc:
        passthrough.drop_own_frame(exc)
        raise

A bare `raise` re-raises the exception with its `__traceback__` as it is now and
adds no entry for the frame it leaves (CPython 3.11 to 3.14: RAISE_VARARGS with
no argument goes to the unwinding without PyTraceBack_Here), so the caller's
entry is followed by the original's, as under python.  `try` costs nothing until
an exception is raised.

Imports nothing but sys (the patches are installed at start-up).
"""
import sys


def drop_own_frame(exc):
    """Cut the caller's frame from the head of `exc`'s traceback, where an error
    raised below it has just put it."""
    tb = exc.__traceback__
    if tb is not None and tb.tb_frame is sys._getframe(1):
        exc.__traceback__ = tb.tb_next
