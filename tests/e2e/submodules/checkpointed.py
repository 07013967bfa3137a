"""`import torch.utils.checkpoint`, then `torch.utils.checkpoint.checkpoint(...)` in
the training loop (activation checkpointing, written the way its docs write it)."""
import torch
import torch.utils.checkpoint
from torch import nn

torch.manual_seed(0)
block = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 8))
head = nn.Linear(8, 1)
opt = torch.optim.SGD([*block.parameters(), *head.parameters()], lr=0.05)
x, y = torch.randn(64, 8), torch.randn(64, 1)
for step in range(10):
    opt.zero_grad()
    h = torch.utils.checkpoint.checkpoint(block, x.requires_grad_(), use_reentrant=False)
    loss = ((head(h) - y) ** 2).mean()
    loss.backward()
    opt.step()
    print(step, loss.item().hex())
