# The program handles MemoryError itself: Portal must not step in.  argv[1] says
# where the handler is: around the call, inside the loop body, in the caller's
# except clause with a tuple of types, or a broad `except Exception`.
import sys


def process(items):
    out = []
    for it in items:  # [loop]
        out.append(it * 2)  # [oom]
        print("item", it)
    return out


def process_skipping(items):
    out = []
    for it in items:  # [skip_loop]
        try:
            out.append(it * 3)  # [skip_oom]
        except MemoryError:
            print("skipped the batch", it)
            continue
        print("item", it)
    return out


where = sys.argv[1]
if where == "around":
    try:
        print(process([1, 2, 3, 4, 5]))
    except MemoryError:
        print("handled MemoryError in the program's own handler")
        sys.exit(4)
elif where == "inside":
    print(process_skipping([1, 2, 3, 4, 5]))
elif where == "tuple":
    try:
        print(process([1, 2, 3, 4, 5]))
    except (KeyError, MemoryError) as e:
        print("handled", type(e).__name__)
        sys.exit(5)
elif where == "broad":
    try:
        print(process([1, 2, 3, 4, 5]))
    except Exception as e:
        print("broad handler", type(e).__name__)
        sys.exit(6)
