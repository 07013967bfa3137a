# The job's exit status after the resume is the program's: sys.exit(3), or an
# uncaught exception raised in the re-entered function (its traceback as python's).
import sys


def work(n, mode):
    total = 0
    for i in range(n):  # [loop]
        total += 0  # [oom]
        total += i
        print("i", i, total)
    if mode == "raise":
        raise KeyError(f"missing {total}")
    return total


result = work(6, sys.argv[1])
print("result", result)
sys.exit(3)
