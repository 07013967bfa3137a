import numpy as np


def train(steps):
    weights = np.arange(4096, dtype=np.float64)
    total = 0.0
    for step in range(steps):
        weights *= 1.5  # [oom]
        total += float(weights.sum())
        print("step", step, total)
    return total


print("result", train(5))
