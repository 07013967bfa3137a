"""An uncaught exception from a nested call: traceback on stderr after the output
printed so far, exit status 1."""
import sys


def inner(n):
    return {"a": 1}[n]


def outer():
    print("before", flush=False)
    print("err before", file=sys.stderr)
    return inner("missing")


print("start")
outer()
print("not reached")
