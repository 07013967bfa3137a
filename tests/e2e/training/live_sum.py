# Losses summed across iterations for one backward() at the end: at any resume
# point inside the loop the sum's graph is live, so no loop can be the resume
# point and the error ends the job as under python, saying why.
import torch

torch.manual_seed(4)
w = torch.randn(3, requires_grad=True)
total = 0
for i in range(10):
    x = torch.randn(3)
    total = total + (w * x).sum() ** 2
total.backward()
print("grad", w.grad.tolist())
