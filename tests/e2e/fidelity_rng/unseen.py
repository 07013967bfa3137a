# Unmarked loops: one draws through a name the table cannot see (a numpy
# Generator's `bytes`, left out: the builtin's name), one draws nothing at all.
import random
import sys

import numpy as np

random.seed(1)
np.random.seed(2)
rng = np.random.default_rng(3)


def shuffled_key(n):
    return rng.bytes(n).hex()


if sys.argv[1] == "unseen":
    for i in range(5):
        key = rng.bytes(4)
        room = [0.0] * 8                   # line 20: drew through a name not in the table
        print(i, key.hex())
else:
    total = 0
    for i in range(5):
        room = [0.0] * 8                   # line 25: drew nothing
        total += sum(range(i))
        print(i, total)
print("after", repr(random.random()), repr(np.random.random()), int(rng.integers(1 << 30)))
