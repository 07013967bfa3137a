"""An error raised under an LR scheduler's step() and in a BatchNorm's __init__
(argv[1]): library methods Portal counts."""
import sys

import torch

model = torch.nn.Linear(2, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def factor(epoch):
    if epoch == 2:
        raise ValueError("no factor for epoch 2")
    return 1.0


if sys.argv[1] == "batchnorm":
    norm = torch.nn.BatchNorm1d("four")
scheduler = torch.optim.lr_scheduler.LambdaLR(opt, factor)
for epoch in range(3):
    opt.step()
    scheduler.step()
    print("epoch", epoch, flush=True)
