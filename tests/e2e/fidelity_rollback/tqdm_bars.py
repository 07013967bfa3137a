# Two tqdm bars as people use them: one over the loader (for x, y in tqdm(loader)),
# one updated by hand in the body with the loss as its postfix.
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from tqdm import tqdm

from common import digest, exact

FORMAT = "{n}/{total} [{postfix}]"


def train(model, loader, epochs):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    total = tqdm(total=epochs * len(loader), bar_format=FORMAT, file=sys.stderr, mininterval=0)
    for epoch in range(epochs):
        bar = tqdm(loader, bar_format=FORMAT, file=sys.stderr, leave=False)
        for x, y in bar:
            loss = nn.functional.mse_loss(model(x), y)
            total.update(1)
            total.set_postfix(loss=f"{loss.item():.6f}")
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(f"epoch {epoch} batch {exact(x)} loss {exact(loss)} total {total.n}")
        print(f"epoch {epoch} loader bar {bar.n} {bar}")
    print(f"total bar {total.n} {total}")
    total.close()


torch.manual_seed(0)
X = torch.randn(20, 5)
Y = X[:, :1] * 2.0
net = nn.Sequential(nn.Linear(5, 12), nn.Dropout(0.2), nn.Tanh(), nn.Linear(12, 1))
train(net, DataLoader(TensorDataset(X, Y), batch_size=4, shuffle=True), epochs=2)
print("weights", digest(net.state_dict()))
