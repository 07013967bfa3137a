# An evaluation loop (no backward, no draw of its own): each iteration scores the
# model over a DataLoader in a list comprehension, and over batches taken by
# next() from an iterator held across the loop in a generator expression.  Each
# iter(loader) draws the loader's seed from torch's default generator (and a
# shuffled sampler its permutation); the torch.rand at the end shows the
# generator's position.
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

SHUFFLE = "shuffle" in sys.argv[1:]


def score(model, x, y):
    return nn.functional.mse_loss(model(x), y).item()


def main():
    torch.manual_seed(2)
    model = nn.Linear(4, 1)
    data = TensorDataset(torch.randn(24, 4), torch.randn(24, 1))
    val_loader = DataLoader(data, batch_size=4, shuffle=SHUFFLE)
    train_loader = DataLoader(data, batch_size=3, shuffle=SHUFFLE)
    it = iter(train_loader)
    for scale in range(4):
        losses = [score(model, x * scale, y) for x, y in val_loader]
        seen = sum(score(model, *next(it)) for _ in range(2))
        print(scale, [v.hex() for v in losses], seen.hex())
    print("rand", torch.rand(1).item().hex())


main()
