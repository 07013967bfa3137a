# An error before anything irreversible: nothing will differ.
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def train():
    for step in range(4):
        x = torch.randn(8, 4)
        loss = model(x).pow(2).mean()   # line 12: the fake OOM
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("step", step, round(loss.item(), 6))


train()
