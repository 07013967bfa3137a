# A small CNN trained the way people write it: synthetic data in a DataLoader
# (shuffled), Adam with a step scheduler, dropout, gradient accumulation, an
# evaluation under torch.no_grad() inside the epoch loop, the user's own
# torch.save every few steps, loops in main() and in train(epoch).
import os
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from common import digest

torch.manual_seed(0)
X = torch.randn(96, 1, 8, 8)
Y = (X.mean(dim=(1, 2, 3)) > 0).long()
loader = DataLoader(TensorDataset(X, Y), batch_size=8, shuffle=True)
model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Dropout(0.2), nn.Linear(4 * 6 * 6, 2))
opt = torch.optim.Adam(model.parameters(), lr=0.01)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
loss_fn = nn.CrossEntropyLoss()
ACCUMULATE = 2
step = 0


def train(epoch):
    global step
    model.train()
    for i, (xb, yb) in enumerate(loader):
        loss = loss_fn(model(xb), yb) / ACCUMULATE
        loss.backward()
        if (i + 1) % ACCUMULATE == 0:
            opt.step()
            opt.zero_grad()
            sched.step()
        step += 1
        if step % 5 == 0:
            torch.save(model.state_dict(), "user_checkpoint.pt")
            with torch.no_grad():
                model.eval()
                accuracy = (model(X).argmax(1) == Y).float().mean().item()
                model.train()
            print(f"epoch {epoch} step {step} loss {loss.item():.6f} acc {accuracy:.4f} lr {sched.get_last_lr()[0]}")


def main():
    for epoch in range(3):
        train(epoch)
    print("weights", digest(model.state_dict()))
    print("saved", digest(torch.load("user_checkpoint.pt")))


main()
