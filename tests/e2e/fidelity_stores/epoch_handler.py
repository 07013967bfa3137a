# `while step < max_steps: try: batch = next(it) except StopIteration: epoch += 1;
# it = iter(loader)`: the epoch counted in the handler of the body's own try.
# train(): its iterations are marked (the body calls backward()); evaluate(): not.
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def train(model, opt, loader, max_steps):
    step, epoch = 0, 0
    it = iter(loader)
    while step < max_steps:
        try:
            x, y = next(it)
        except StopIteration:
            epoch += 1
            it = iter(loader)
            x, y = next(it)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        print("step", step, "epoch", epoch, loss.item().hex())
    print("trained", epoch, "epochs")


def evaluate(model, loader, max_steps):
    step, epoch, total = 0, 0, 0.0
    it = iter(loader)
    while step < max_steps:
        try:
            x, y = next(it)
        except StopIteration:
            epoch += 1
            it = iter(loader)
            x, y = next(it)
        total += nn.functional.mse_loss(model(x), y).item()
        step += 1
    print("evaluated", epoch, "epochs", total.hex())


torch.manual_seed(0)
model = nn.Linear(3, 1)
loader = DataLoader(TensorDataset(torch.randn(10, 3), torch.randn(10, 1)), batch_size=4, shuffle=True)
if sys.argv[1] == "train":
    train(model, torch.optim.SGD(model.parameters(), lr=0.1), loader, 9)
    print("weights", [p.detach().sum().item().hex() for p in model.parameters()])
else:
    evaluate(model, loader, 9)
print("rand", torch.rand(1).item().hex())
