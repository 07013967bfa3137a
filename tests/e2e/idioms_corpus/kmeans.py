"""Mini-batch k-means (Sculley's): a batch drawn by rng.choice each iteration,
each point moving its nearest center by a per-center learning rate 1/counts[j]."""
# corpus-names: rng, counts, centers, random draws
import numpy as np

import corpus

K = 4
rng = np.random.default_rng(0)
X = np.concatenate([rng.standard_normal((100, 2)) * 0.4 + c for c in ((0, 0), (3, 3), (0, 3), (3, 0))])
centers = X[rng.choice(len(X), K, replace=False)].copy()
counts = np.zeros(K)


def nearest(batch, centers):
    d = ((batch[:, None, :] - centers[None, :, :]) ** 2).sum(-1)
    return d.argmin(1)


for it in range(12):
    batch = X[rng.choice(len(X), 16, replace=False)]
    assigned = nearest(batch, centers)                       # corpus: before@5=memory
    for x, j in zip(batch, assigned):
        counts[j] += 1
        eta = 1.0 / counts[j]                                # corpus: inside@70=memory
        centers[j] = (1 - eta) * centers[j] + eta * x
    inertia = ((batch - centers[assigned]) ** 2).sum()       # corpus: after@9=memory
    corpus.grow()                                            # corpus: real@6
    print(it, corpus.exact(inertia), counts.tolist())
print("centers", corpus.digest(centers), rng.random())
