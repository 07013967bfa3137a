# After a resume the program's recursion depth is what it was: each re-entered
# caller (a function, a method with keyword arguments, f(*args, **kwargs), a class
# whose __init__ runs the loop) counts as under python, so the depths read and
# where RecursionError strikes are python's.
import sys


def depth_now():
    try:
        sys.setrecursionlimit(1)
    except RecursionError as exc:
        return str(exc).split("depth ")[1].split(":")[0]


def reach():
    n = 0

    def down():
        nonlocal n
        n += 1
        down()
    try:
        down()
    except RecursionError:
        return n


class Acc:
    def __init__(self, n):
        self.items = []
        for i in range(n):  # [init_loop]
            self.items.append((depth_now(), reach()))  # [init_oom]
            print("init", i, self.items[-1])

    def run(self, n, *, scale=1):
        for i in range(n):  # [run_loop]
            print("method", i, depth_now(), reach() * scale)  # [run_oom]
        return self


def f(n):
    for i in range(n):  # [f_loop]
        print("f", i, depth_now(), reach())  # [f_oom]


def g(*args, **kwargs):
    f(*args, **kwargs)
    Acc(3).run(3, scale=2)


g(3)
