# Loops in functions entered in different ways; argv[1] picks one.
import functools
import sys


def keyword_only(*, start, stop, step=1):
    acc = []
    for i in range(start, stop, step):  # [kw_loop]
        v = i * i  # [kw_oom]
        acc.append(v)
        print("kw", i, v)
    return acc


def star_args(*numbers, **weights):
    total = 0
    for n in numbers:  # [star_loop]
        w = weights.get(f"w{n}", 1)  # [star_oom]
        total += n * w
        print("star", n, w, total)
    return total, sorted(weights)


class Accumulator:
    scale = 10
    created = 0

    def __init__(self, label):
        self.label = label
        self.values = []
        Accumulator.created += 1

    def add_all(self, items):
        for item in items:  # [method_loop]
            scaled = item * self.scale  # [method_oom]
            self.values.append(scaled)
            print("method", self.label, item, scaled)
        return self

    @staticmethod
    def static_sum(items, bias=0):
        s = bias
        for item in items:  # [static_loop]
            s = s + item  # [static_oom]
            print("static", item, s)
        return s

    @classmethod
    def from_items(cls, items):
        inst = cls("made")
        for item in items:  # [class_loop]
            inst.values.append(item + cls.scale)  # [class_oom]
            print("classmethod", item, inst.values[-1])
        return inst


def make_counter(start):
    count = start
    seen = []

    def bump(steps):
        nonlocal count
        for s in range(steps):  # [closure_loop]
            delta = s + 1  # [closure_oom]
            count += delta
            seen.append(count)
            print("closure", s, count)
        return count

    return bump, seen


def with_defaults(n, factor=3, acc=[], *, tag="d"):
    for i in range(n):  # [defaults_loop]
        item = (tag, i * factor)  # [defaults_oom]
        acc.append(item)
        print("defaults", item)
    return acc


def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        print("calling", fn.__name__)
        result = fn(*args, **kwargs)
        print("returned", result)
        return result
    return wrapper


@logged
def decorated(items, bias=0):
    total = bias
    for it in items:  # [deco_loop]
        step = it * it  # [deco_oom]
        total += step
        print("deco", it, total)
    return total


class Builder:
    def __init__(self, items, scale=2):
        self.parts = []
        for it in items:  # [init_loop]
            part = it * scale  # [init_oom]
            self.parts.append(part)
            print("init", it, part)


def apply_all(items, fn):
    out = []
    for x in items:  # [lambda_loop]
        y = fn(x)  # [lambda_oom]
        out.append(y)
        print("lambda", x, y)
    return out


def main(kind):
    if kind == "keyword":
        print(keyword_only(start=2, stop=20, step=3))
    elif kind == "star":
        print(star_args(1, 2, 3, 4, 5, w2=20, w4=40))
    elif kind == "method":
        acc = Accumulator("m")
        res = acc.add_all([1, 2, 3, 4, 5])
        print(res is acc, acc.values, Accumulator.created)
    elif kind == "static":
        print(Accumulator.static_sum([5, 6, 7, 8], bias=100))
    elif kind == "classmethod":
        inst = Accumulator.from_items([1, 2, 3, 4])
        print(type(inst).__name__, type(inst) is Accumulator, inst.label, inst.values,
              Accumulator.created)
    elif kind == "closure":
        bump, seen = make_counter(10)
        print(bump(6), seen)
        print(bump(2), seen)  # the same cells as before the suspension
    elif kind == "defaults":
        print(with_defaults(5))
        print(with_defaults(2, tag="again"))  # the mutable default keeps what it got
        print(with_defaults.__defaults__, with_defaults.__kwdefaults__)
    elif kind == "lambda":
        square_plus = lambda v, k=7: v * v + k  # noqa: E731
        print(apply_all([1, 2, 3, 4, 5], square_plus))
        run = lambda items: apply_all(items, lambda v: -v)  # noqa: E731
        print(run([6, 7, 8]))
    elif kind == "decorator":
        print(decorated([1, 2, 3, 4], bias=10))
    elif kind == "init":
        b = Builder([1, 2, 3, 4, 5], scale=3)
        print(type(b).__name__, b.parts)
    elif kind == "partial":
        # one positional argument: while partial calls apply_all, that argument
        # sits in the stack slot of the callable
        run = functools.partial(apply_all, [1, 2, 3, 4, 5])
        print(run(lambda v: v * 10))
    else:
        raise SystemExit(f"unknown kind {kind!r}")


main(sys.argv[1])
