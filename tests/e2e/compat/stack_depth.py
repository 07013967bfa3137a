"""The program's frames are the only ones: print_stack() and sys._getframe() at
module level and in a function, f_back of the module frame, inspect.stack()."""
import inspect
import sys
import traceback


def depth():
    n, f = 0, sys._getframe()
    while f is not None:
        n, f = n + 1, f.f_back
    return n


traceback.print_stack()
print("module frame back", sys._getframe().f_back)
print("module depth", depth())
print("module code", sys._getframe().f_code.co_name, sys._getframe().f_code.co_filename)


def inner():
    traceback.print_stack()
    print("function depth", depth())
    print("inspect", [(fi.function, fi.lineno) for fi in inspect.stack()])
    print("extract", [(fs.name, fs.lineno) for fs in traceback.extract_stack()])


inner()
try:
    sys._getframe(1)
except ValueError as exc:
    print("getframe(1) at module level:", exc)
