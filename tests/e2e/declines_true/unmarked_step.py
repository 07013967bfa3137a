import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 4)


def update():
    opt.step()


for i in range(5):
    loss = model(x).pow(2).mean()
    grads = torch.autograd.grad(loss, list(model.parameters()))
    for p, g in zip(model.parameters(), grads):
        p.grad = g
    update()
    print(i, f"{loss.item():.6f}")
