# L-BFGS calls the user's closure from inside optimizer.step(): an error raised
# in the closure is inside the step, and the weights may be half updated.
import torch

torch.manual_seed(6)
w = torch.randn(4, requires_grad=True)
target = torch.randn(4)
opt = torch.optim.LBFGS([w], max_iter=5)


def closure():
    opt.zero_grad()
    loss = ((w - target) ** 2).sum()
    loss.backward()
    return loss


for step in range(5):
    loss = opt.step(closure)
    print("step", step, round(loss.item(), 6))
