# A try/except of the program inside the loop handles other errors; the
# out-of-memory error passes through it.
import random

random.seed(4)
results = []


def check(x):
    if x < 0:
        raise ValueError(f"negative {x}")
    return 100 // x


for i in range(12):  # [loop]
    try:
        x = random.randint(-3, 9)  # [oom]
        results.append(check(x))
    except ValueError as e:
        print("skipped", i, e)
    except ZeroDivisionError:
        print("zero at", i)
    else:
        print("ok", i, results[-1])
print("results", results)
