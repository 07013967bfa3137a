"""A numpy sum kept in a local of a loop that draws: `total += block.sum()` makes
a numpy.float64, rebound every iteration before the error."""
import numpy as np


def main():
    rng = np.random.default_rng(5)
    total = 0.0
    for step in range(6):
        total += rng.standard_normal(1000).sum()
        block = np.ones(1000) * step
        total += block[:10].sum()
        print(step, float(total).hex())


main()
