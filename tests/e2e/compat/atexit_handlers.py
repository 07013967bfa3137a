"""atexit handlers run last, in reverse order; one prints, one reads globals of
__main__ (python deletes __file__ once the script ends normally or by an uncaught
exception, but not on sys.exit).  argv[1]: normal, exit or raise."""
import atexit
import sys

state = {"phase": "running"}


def first_registered():
    print("first registered, runs last", state["phase"])
    print("to stderr from atexit", file=sys.stderr)


def reads_main_globals():
    g = globals()
    print("__file__ in globals:", "__file__" in g, "__cached__ in globals:", "__cached__" in g)
    print("sys.last_type:", getattr(sys, "last_type", None))


atexit.register(first_registered)
atexit.register(reads_main_globals)
atexit.register(print, "print registered directly", "with args")
print("registered")
state["phase"] = "ended"
mode = sys.argv[1] if len(sys.argv) > 1 else "normal"
if mode == "exit":
    sys.exit(6)
elif mode == "raise":
    raise RuntimeError("uncaught before atexit")
