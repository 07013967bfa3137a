"""A program that sets a recursion limit below the depth of Portal's bootstrap
(python's own main has no frames under the script): it runs, ends and runs its
atexit handlers at python's depth and limit."""
import atexit
import sys


def at_exit():
    try:
        sys.setrecursionlimit(1)
    except RecursionError as exc:
        print("atexit:", exc, sys.getrecursionlimit())


atexit.register(at_exit)
sys.setrecursionlimit(4)
print("limit", sys.getrecursionlimit())
if sys.argv[1:] == ["raise"]:
    raise ValueError("with a low limit")
if sys.argv[1:] == ["exit"]:
    sys.exit(3)
