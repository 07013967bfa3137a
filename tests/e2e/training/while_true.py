# A `while True` loop at module level, stopping on its own condition.  With
# BIG_AT=N it also asks for a 3 GiB scratch tensor at step N, which a job capped
# at 2 GiB cannot have: a real out-of-memory error.
import os

import torch
from torch import nn

from common import digest

torch.manual_seed(2)
model = nn.Linear(5, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
w_true = torch.randn(5, 1)
step = 0
while True:
    if str(step) == os.environ.get("BIG_AT"):
        scratch = torch.empty(3 << 30, dtype=torch.uint8)
        del scratch
    x = torch.randn(16, 5)
    loss = ((model(x) - x @ w_true) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    if step % 10 == 0:
        print("step", step, round(loss.item(), 6))
    if step == 60:
        break
print("weights", digest(model.state_dict()))
