"""multiprocessing with the default start method (fork on Linux): a Pool map and a
Process whose output and exit code the parent reports."""
import multiprocessing as mp
import sys


def square(x):
    return x * x


def child(q, tag):
    print("child sees", __name__, sys.argv, flush=True)
    q.put(tag.upper())
    sys.exit(5)


if __name__ == "__main__":
    print("start method", mp.get_start_method(), flush=True)
    with mp.Pool(2) as pool:
        print("squares", pool.map(square, range(10)))
    q = mp.Queue()
    p = mp.Process(target=child, args=(q, "forked"))
    p.start()
    print("from child", q.get())
    p.join()
    print("child exit code", p.exitcode)
