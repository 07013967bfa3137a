# The program's own recursion limit is kept across a resume: the limit it reads
# and how deep it can go, a higher one and a lower one than the default.
import sys


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


sys.setrecursionlimit(int(sys.argv[1]))
for i in range(3):  # [loop]
    print(i, sys.getrecursionlimit(), reach())  # [oom]
