# The loop that runs out of memory is inside a generator that an outer for loop
# (in a function, or at module level) is driving.
import random
import sys

random.seed(2)


def batches(data, size):
    batch = []
    for item in data:  # [gen_loop]
        noisy = item + random.randint(0, 9)  # [oom]
        batch.append(noisy)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def train(data):
    seen = 0
    for b in batches(data, 3):  # [outer]
        seen += len(b)
        print("batch", b, "seen", seen)
    return seen


if sys.argv[1] == "function":
    print("trained on", train(list(range(20, 31))))
else:
    total = 0
    for b in batches(list(range(40, 50)), 4):  # [mod_outer]
        total += sum(b)
        print("module batch", b, total)
    print("total", total)
