# An error after optimizer.step() in the failed iteration: the optimizer has
# already stepped and will step again; the BatchNorm updated its running
# statistics in place in the forward pass.
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=12)


def train():
    for step in range(6):
        x = torch.randn(8, 4)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        print("step", step, round(loss.item(), 6))   # line 20: the fake OOM


for epoch in range(2):
    train()
    print("epoch", epoch)
