# Random augmentation with the program's own generators, drawn in the loop's body
# before the forward: a numpy Generator, a legacy RandomState, a torch.Generator and
# a random.Random held by an Augment object, a numpy Generator as a global; the
# loader shuffles with its own torch.Generator.
import random

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from common import digest, exact


class Augment:
    def __init__(self, seed):
        self.np_rng = np.random.default_rng(seed)
        self.legacy = np.random.RandomState(seed)
        self.torch_gen = torch.Generator().manual_seed(seed)
        self.py_rng = random.Random(seed)

    def __call__(self, x):
        x = x + torch.from_numpy(self.np_rng.normal(0.0, 0.1, size=tuple(x.shape)).astype(np.float32))
        x = x * (1 + 0.1 * torch.rand(x.shape[0], 1, generator=self.torch_gen))
        x = x * torch.from_numpy((self.legacy.rand(x.shape[1]) > 0.1).astype(np.float32))
        if self.py_rng.random() < 0.5:
            x = x.flip(1)
        return x


rng = np.random.default_rng(11)


def train(model, loader, augment, epochs):
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        for step, (x, y) in enumerate(loader):
            x = augment(x)
            scale = float(rng.uniform(0.5, 1.5))
            out = model(x) * scale
            loss = nn.functional.mse_loss(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(f"epoch {epoch} step {step} x {exact(x)} loss {exact(loss)}")


torch.manual_seed(0)
X = torch.randn(32, 6)
Y = X[:, :2].sum(1, keepdim=True)
loader = DataLoader(TensorDataset(X, Y), batch_size=4, shuffle=True,
                    generator=torch.Generator().manual_seed(5))
net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))
train(net, loader, Augment(3), epochs=2)
print("weights", digest(net.state_dict()))
