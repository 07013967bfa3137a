# Two loaders one after the other: itertools.chain, iterated by a for loop or by
# next() in the body (a fixed number of steps over the chain made again each epoch).
import itertools
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from common import digest, exact


def by_for(model, opt, loader_a, loader_b, epochs):
    for epoch in range(epochs):
        for x, y in itertools.chain(loader_a, loader_b):
            out = model(x)
            loss = nn.functional.mse_loss(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(f"epoch {epoch} batch {exact(x)} loss {exact(loss)}")


def by_next(model, opt, loader_a, loader_b, steps):
    batches = itertools.chain(loader_a, loader_b)
    for step in range(steps):
        x, y = next(batches)
        out = model(x)
        loss = nn.functional.mse_loss(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} batch {exact(x)} loss {exact(loss)}")


torch.manual_seed(0)
X = torch.randn(16, 5)
Y = X[:, :1] * 2.0
net = nn.Sequential(nn.Linear(5, 12), nn.Dropout(0.2), nn.Tanh(), nn.Linear(12, 1))
adam = torch.optim.Adam(net.parameters(), lr=0.01)
first = DataLoader(TensorDataset(X[:8], Y[:8]), batch_size=4, shuffle=True)
second = DataLoader(TensorDataset(X[8:], Y[8:]), batch_size=4, shuffle=False)
if sys.argv[1:] == ["next"]:
    by_next(net, adam, first, second, steps=4)
else:
    by_for(net, adam, first, second, epochs=3)
print("weights", digest(net.state_dict()))
