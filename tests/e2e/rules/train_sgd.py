"""A small torch training loop: the fake OOM is put inside torch.optim.SGD.step."""
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(16, 4)
y = torch.randn(16, 1)
for step in range(4):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    print("step", step, round(loss.item(), 6))
