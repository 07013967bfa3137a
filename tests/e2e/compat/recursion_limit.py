"""What a program can observe of the recursion limit and its depth: the limit,
sys.setrecursionlimit()'s "at the recursion depth N" refusal at module level, in a
function and inside a loop, how deep a recursion gets before RecursionError (at the
default limit and at one the program set), in a thread, and in sys.excepthook."""
import sys
import threading


def depth_now():
    """The depth sys.setrecursionlimit() reports (this function's frame included)."""
    try:
        sys.setrecursionlimit(1)
    except RecursionError as exc:
        return str(exc)
    return "no refusal"


def reach():
    n = 0

    def down():
        nonlocal n
        n += 1
        down()
    try:
        down()
    except RecursionError as exc:
        return n, str(exc)


print("limit", sys.getrecursionlimit())
try:
    sys.setrecursionlimit(1)
except RecursionError as exc:
    print("module level:", exc)
print("function:", depth_now())
for i in range(2):
    print("loop", i, depth_now())
print("reach", reach())
sys.setrecursionlimit(120)
print("limit set", sys.getrecursionlimit(), "reach", reach(), depth_now())
sys.setrecursionlimit(1000)
print("limit back", sys.getrecursionlimit(), "reach", reach())
results = []
worker = threading.Thread(target=lambda: results.append((depth_now(), reach())))
worker.start()
worker.join()
print("thread", results)


def hook(kind, value, tb):
    frames, f = [], sys._getframe()
    while f is not None:
        frames.append(f.f_code.co_name)
        f = f.f_back
    print("excepthook", kind.__name__, depth_now(), frames, reach()[0])


sys.excepthook = hook
raise ValueError("to the hook")
