"""Gradient accumulation over 4 micro-batches, in a train() function:
backward() every micro-batch, opt.step(); opt.zero_grad() every 4th; the hidden
layer's gradient clipped by a hook, which runs inside backward()."""
# corpus-names: gradients, backward
import torch
from torch import nn

import corpus

torch.manual_seed(0)
ACCUM = 4
model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
data = torch.randn(64, 6)
target = data.sum(1, keepdim=True).sin()


def clip_hidden(grad):
    return grad.clamp(-0.05, 0.05)                             # corpus: inside@14=torch


def train(steps):
    opt.zero_grad()
    for i in range(steps):
        lo = (i * 4) % 64
        x, y = data[lo:lo + 4], target[lo:lo + 4]
        hidden = model[1](model[0](x))
        hidden.register_hook(clip_hidden)
        loss = (model[2](hidden) - y).pow(2).mean() / ACCUM    # corpus: before@10=cpu
        loss.backward()
        corpus.grow()                                          # corpus: real@7
        if (i + 1) % ACCUM == 0:                               # corpus: after@11=torch
            opt.step()
            opt.zero_grad()
        print(i, corpus.exact(loss))


if __name__ == "__main__":
    train(32)
    print("weights", corpus.digest(model.state_dict()))
