"""Call-heavy pure Python: recursive function calls and method calls on instances."""
from _common import measure, scale


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


class Vec:
    __slots__ = ("x", "y")

    def __init__(self, x, y):
        self.x = x
        self.y = y

    def add(self, other):
        return Vec(self.x + other.x, self.y + other.y)

    def dot(self, other):
        return self.x * other.x + self.y * other.y

    @property
    def norm1(self):
        return abs(self.x) + abs(self.y)


class Counter:
    def __init__(self):
        self.n = 0

    def bump(self, k):
        self.n += k
        return self

    def value(self):
        return self.n


class Shape:
    def area(self):
        raise NotImplementedError


class Square(Shape):
    def __init__(self, s):
        self.s = s

    def area(self):
        return self.s * self.s


class Rect(Square):
    def __init__(self, a, b):
        super().__init__(a)
        self.b = b

    def area(self):
        return self.s * self.b


N = 26 if scale() >= 1 else 24
M = int(250_000 * scale())


def work():
    total = fib(N)
    acc = Vec(0, 0)
    step = Vec(1, -1)
    c = Counter()
    shapes = [Square(3), Rect(2, 5)]
    for i in range(M):
        acc = acc.add(step)
        c.bump(acc.dot(step)).bump(1)
        total += shapes[i & 1].area() + acc.norm1
    return total + c.value()


if __name__ == "__main__":
    measure("calls", work)
