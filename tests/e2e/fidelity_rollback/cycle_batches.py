# A fixed number of steps over an endless loader: itertools.cycle, next() in the body.
import itertools

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from common import digest, exact


def train(model, loader, steps):
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    batches = itertools.cycle(loader)
    for step in range(steps):
        x, y = next(batches)
        out = model(x)
        loss = nn.functional.mse_loss(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} batch {exact(x)} loss {exact(loss)}")


torch.manual_seed(0)
X = torch.randn(24, 5)
Y = X[:, :1] * 2.0
net = nn.Sequential(nn.Linear(5, 12), nn.Dropout(0.2), nn.Tanh(), nn.Linear(12, 1))
train(net, DataLoader(TensorDataset(X, Y), batch_size=4, shuffle=True), steps=15)
print("weights", digest(net.state_dict()))
