"""A training loop whose state grows by KIND of STEP_MIB MiB a step, written at
once, up to TOTAL_MIB MiB (each item made before the step trains: an iteration
that runs out has changed nothing, and runs again from its start as it would
have run); prints a line a step and, at the end, a digest of the
final state (the model, the random generators, every item's contents sampled,
a deep chain of objects).

    python3 grow.py torch|numpy|list|bytes STEP_MIB TOTAL_MIB
"""
import hashlib
import random
import sys

kind, step_mib, total_mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
size = step_mib << 20

if kind == "torch":
    import torch
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
elif kind == "numpy":
    import numpy
    rng = numpy.random.default_rng(0)
    weights = numpy.zeros(64)
else:
    rng = random.Random(0)
    weights = [0.0] * 64


def train():
    global weights
    if kind == "torch":
        x = torch.randn(32, 64)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    elif kind == "numpy":
        weights = weights * 0.9 + rng.standard_normal(64)
    else:
        weights = [w * 0.9 + rng.gauss(0, 1) for w in weights]


def item(step):
    if kind == "torch":
        return torch.full((size // 4,), float(step))
    if kind == "numpy":
        return numpy.full(size // 8, step, dtype=numpy.float64)
    if kind == "list":
        return [step] * (size // 8)
    return bytes([step % 251 + 1]) * size


def sample(x):
    if kind == "torch":
        x = x.numpy()
    if kind in ("torch", "numpy"):
        return x[:16].tobytes() + x[-16:].tobytes() + str(x.size).encode()
    if kind == "list":
        return repr((x[:4], x[-4:], len(x))).encode()
    return x[:64] + x[-64:] + str(len(x)).encode()


class Node:
    def __init__(self, value, next):
        self.value, self.next = value, next


# A chain 20,000 deep: saved by the pickler's own thread (its big stack), which
# must start when memory has run out.
chain = None
for i in range(20000):
    chain = Node(i, chain)

history = []
for step in range(total_mib // step_mib):
    grown = item(step)    # first: the iteration that runs out has changed nothing yet
    train()
    history.append(grown)
    print("step", step, flush=True)

digest = hashlib.sha256()
if kind == "torch":
    for p in model.parameters():
        digest.update(p.detach().numpy().tobytes())
    digest.update(torch.randn(4).numpy().tobytes())
elif kind == "numpy":
    digest.update(weights.tobytes() + rng.standard_normal(4).tobytes())
else:
    digest.update(repr((weights, rng.random())).encode())
for x in history:
    digest.update(sample(x))
node, total = chain, 0
while node is not None:
    total, node = total + node.value, node.next
digest.update(str(total).encode())
print(len(history), digest.hexdigest())
