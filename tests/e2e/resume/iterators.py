# One loop over iterators of many kinds (argv[1]); after 6 items it breaks, and an
# iterator that is its own iterable shows where it stands.
import itertools
import sys


class Countdown:
    """A user iterator class."""

    def __init__(self, start):
        self.current = start

    def __iter__(self):
        return self

    def __next__(self):
        if self.current <= 0:
            raise StopIteration
        self.current -= 1
        return self.current + 1


def squares(n):
    for i in range(n):  # [gen_loop]
        yield i * i


def make(kind):
    table = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}
    return {
        "range": lambda: range(3, 60, 4),
        "list": lambda: ["a", "bb", "ccc", "dddd", "eeeee", "ffffff", "g"],
        "tuple": lambda: (1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5),
        "str": lambda: "iterators",
        "dict_keys": lambda: table.keys(),
        "dict_items": lambda: table.items(),
        "dict_values": lambda: table.values(),
        "enumerate": lambda: enumerate("portal!!"),
        "zip": lambda: zip(range(100), "zipped!", [1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5]),
        "count": lambda: itertools.count(5, 3),
        "islice": lambda: itertools.islice(itertools.count(), 3, 60, 2),
        "chain": lambda: itertools.chain([1, 2], (3,), "abcdef"),
        "product": lambda: itertools.product("ab", range(3), [True, False]),
        "generator": lambda: squares(20),
        "iterator_class": lambda: Countdown(9),
    }[kind]()


def consume(kind):
    it = make(kind)
    seen = []
    for item in it:  # [loop]
        note = repr(item)  # [oom]
        seen.append(note)
        print(kind, len(seen), note)
        if len(seen) == 6:
            break
    print("seen", seen)
    if iter(it) is it:
        print("rest", [repr(x) for x in itertools.islice(it, 3)])
    return len(seen)


print("consumed", consume(sys.argv[1]))
