"""Loop-heavy pure Python: for/while loops with arithmetic, list and dict operations."""
from _common import measure, scale

M = int(300_000 * scale())


def work():
    # for loop with integer and float arithmetic
    s = 0
    f = 0.0
    for i in range(M):
        s += (i * i) % 7 - (i >> 3)
        f += i * 0.5 - f * 1e-6
    # while loop (Collatz steps)
    steps = 0
    n = 1
    while n < M // 20:
        k = n
        while k != 1:
            k = k // 2 if k % 2 == 0 else 3 * k + 1
            steps += 1
        n += 1
    # list operations
    xs = []
    for i in range(M // 2):
        xs.append(i ^ (i >> 2))
    xs.sort()
    ys = [x * 2 for x in xs if x & 1]
    s += sum(ys[::7]) + len(ys)
    # dict operations
    d = {}
    for i in range(M // 2):
        key = i % 1009
        d[key] = d.get(key, 0) + i
    for key in list(d):
        if key % 3 == 0:
            del d[key]
    s += sum(d.values())
    return s + steps + int(f) % 1000003


if __name__ == "__main__":
    measure("loops", work)
