# A real allocation failure (no fixture) that the program handles itself: Portal
# must give exactly python's output and status.
import sys


def allocate(n):
    size = (1 << 62) if n == 3 else 8
    return bytearray(size)


def process(items):
    out = []
    for it in items:
        out.append(len(allocate(it)))
        print("item", it)
    return out


def process_skipping(items):
    out = []
    for it in items:
        try:
            out.append(len(allocate(it)))
        except MemoryError:
            print("skipped the batch", it)
            continue
        print("item", it)
    return out


where = sys.argv[1]
if where == "around":
    try:
        print(process([1, 2, 3, 4, 5]))
    except MemoryError as e:
        print("handled", type(e).__name__)
        sys.exit(4)
elif where == "inside":
    print(process_skipping([1, 2, 3, 4, 5]))
elif where == "uncaught_outside_loop":
    print("before")
    allocate(3)
