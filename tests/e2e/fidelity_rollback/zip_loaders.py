# Two loaders walked together (labelled and unlabelled data, one shuffled, one not):
# for a, b in zip(loader_a, loader_b), for several epochs, dropout in the model.
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from common import digest, exact, spike

SHUFFLE_B = sys.argv[1:] == ["both"]

torch.manual_seed(0)
XA = torch.randn(32, 4)
YA = XA.sum(1, keepdim=True)
XB = torch.randn(32, 4)
loader_a = DataLoader(TensorDataset(XA, YA), batch_size=4, shuffle=True)
loader_b = DataLoader(TensorDataset(XB), batch_size=4, shuffle=SHUFFLE_B)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.02)


def epoch(e):
    for (xa, ya), (xb,) in zip(loader_a, loader_b):
        supervised = nn.functional.mse_loss(spike(model(xa)), ya)
        consistency = (model(xb) - model(xb + 0.1)).pow(2).mean()
        loss = supervised + 0.1 * consistency
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"epoch {e} a {exact(xa)} b {exact(xb)} loss {exact(loss)}")


for e in range(3):
    epoch(e)
print("weights", digest(model.state_dict()))
