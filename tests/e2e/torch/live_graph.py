"""Losses summed across iterations for one backward() after the loop: the sum is
part of a live autograd graph, which Portal must not cut.  The OOM in the loop
cannot be rescued there; the error goes on as in python, and Portal says why,
naming the variable."""
import torch

torch.manual_seed(0)
w = torch.ones(4, requires_grad=True)
total = torch.zeros(())
for step in range(5):  # [loop]
    x = torch.randn(4)
    total = total + (w * x).sum()  # [accumulate]
total.backward()
print(w.grad.tolist())
