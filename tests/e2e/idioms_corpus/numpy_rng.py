"""Linear regression by gradient descent on numpy, the data drawn each step
from a module-level default_rng, and a bootstrap of the residuals drawn from a
Generator made in a function."""
# corpus-names: random draws, rng, local, weights
import numpy as np

import corpus

rng = np.random.default_rng(3)
true_w = np.arange(16.0) / 16


def bootstrap(residuals, rounds, seed):
    local = np.random.default_rng(seed)
    means = []
    for r in range(rounds):
        idx = local.integers(0, len(residuals), size=len(residuals))
        sample = residuals[idx]                             # corpus: inside@6=memory
        means.append(sample.mean())
    return np.array(means)


weights = np.zeros(16)
for step in range(10):
    block = rng.standard_normal((32, 16))
    target = block @ true_w + rng.normal(0.0, 0.1, 32)
    residuals = block @ weights - target                    # corpus: before@6=memory
    grad = block.T @ residuals / 32
    weights -= 0.05 * grad                                  # corpus: after@7=memory
    spread = bootstrap(residuals, 4, step).std()
    corpus.grow()                                           # corpus: real@8
    print(step, corpus.exact(weights), corpus.exact(spread))
print("weights", corpus.digest(weights), rng.random())
