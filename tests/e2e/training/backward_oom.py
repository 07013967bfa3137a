# A training loop in a function whose iterations may fail in backward(): nothing
# before backward() in an iteration draws random numbers or accumulates
# gradients, so the iteration runs again exactly.
import torch
from torch import nn

from common import digest


def train(steps=40):
    torch.manual_seed(5)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    xs, ys = torch.randn(10, 4, 8), torch.randn(10, 4, 1)
    for step in range(steps):
        x, y = xs[step % 10], ys[step % 10]
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if step % 8 == 7:
            print("step", step, round(loss.item(), 6))
    return model


print("weights", digest(train().state_dict()))
