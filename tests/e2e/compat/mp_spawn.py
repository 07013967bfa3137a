"""multiprocessing with spawn: the children start a fresh /usr/bin/python3 that
re-imports this script as __mp_main__ by its path, so the script's identity
(__file__, sys.path, sys.argv) must be right for them to work."""
import multiprocessing as mp
import sys

import mymod

print("module level runs as", __name__, flush=True)


def cube(x):
    return x * x * x + mymod.VALUE


def child(q):
    main = sys.modules["__main__"]
    q.put((main.__name__, main.__file__, sys.argv, sys.path[0]))


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    pool = ctx.Pool(2)
    print("cubes", pool.map(cube, range(6)))
    # close+join, not terminate (the with statement): every worker finishes
    # starting, so each prints its module-level line exactly once.
    pool.close()
    pool.join()
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    print("child saw", q.get())
    p.join()
    print("child exit code", p.exitcode)
