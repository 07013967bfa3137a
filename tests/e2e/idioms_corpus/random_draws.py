"""A Monte Carlo estimate, no torch: the random module's own generator drawn in
a loop at module level, a random.Random object drawn in a function's loop."""
# corpus-names: random draws, random, rnd, estimates.append
import random

import corpus


def payoff(x, shock):
    level = x * 1.5 + shock                         # corpus: inside@7=memory
    return max(level - 1.0, 0.0)


def simulate(seed, paths):
    rnd = random.Random(seed)
    values = []
    for i in range(paths):
        x = rnd.random()
        shock = rnd.gauss(0.0, 0.2)
        value = payoff(x, shock)
        values.append(value)                        # corpus: after@9=memory
    return values


random.seed(7)
estimates = []
for batch in range(6):
    u = random.random()
    v = random.gauss(0.0, 1.0)
    values = simulate(batch, 12)                    # corpus: before@4=memory
    estimates.append(sum(values) / len(values) + u * v)
    corpus.grow()                                   # corpus: real@5
    print(batch, corpus.exact(estimates[-1]))
print("estimate", corpus.exact(sum(estimates)), random.random())
