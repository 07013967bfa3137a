"""Errors raised under functions Portal wraps to note gradients and random states
(argv[1]): an optimizer given no parameters, a module's zero_grad given a wrong
argument, torch.manual_seed given a string."""
import sys

import torch

model = torch.nn.Linear(2, 2)
if sys.argv[1] == "optimizer":
    opt = torch.optim.SGD([], lr=0.1)
elif sys.argv[1] == "zero_grad":
    model.zero_grad(set_to_none="maybe", extra=1)
elif sys.argv[1] == "seed":
    torch.manual_seed("seven")
print("not reached")
