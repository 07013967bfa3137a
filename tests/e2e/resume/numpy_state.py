# numpy arrays (a view sharing memory with its base among them) and numpy's global
# random state, at module level and in a function's locals.
import numpy as np

np.random.seed(42)
gen = np.random.default_rng(7)


def train(steps):
    weights = np.zeros((4, 3))
    view = weights[1:3]
    counts = np.arange(6, dtype=np.int64)
    history = []
    for step in range(steps):  # [loop]
        noise = np.random.rand(4, 3)  # [oom]
        weights += noise * 0.1
        counts[step % 6] += step
        sample = gen.integers(0, 100, size=3)
        history.append(float(weights.sum()))
        print(step, np.round(weights.sum(), 6), sample.tolist())
    view[0, 0] = -1.0  # still the same memory as weights'
    return weights, view, counts, history


weights, view, counts, history = train(6)
print(np.round(weights, 6).tolist())
print(counts.tolist(), [round(h, 6) for h in history])
print(round(float(np.random.rand()), 9), round(float(gen.random()), 9))
print(weights.dtype, view.base is weights, np.shares_memory(view, weights))
