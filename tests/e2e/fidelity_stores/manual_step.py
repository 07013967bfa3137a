"""A model fitted by a module-level loop that applies its gradients by hand (no
optimizer), and a tensor the iteration makes itself and changes in place."""
import torch

torch.manual_seed(0)
fc = torch.nn.Linear(3, 1)
data = torch.randn(40, 3)
target = data @ torch.tensor([[1.0], [-2.0], [0.5]])

for step in range(8):
    x, y = data[step * 5:step * 5 + 5], target[step * 5:step * 5 + 5]
    fc.zero_grad()
    loss = (fc(x) - y).pow(2).mean()
    loss.backward()
    norms = torch.zeros(2)
    for k, param in enumerate(fc.parameters()):
        norms[k:k + 1].add_(param.grad.norm())
        param.data.add_(-0.1 * param.grad)
    print(step, float(loss).hex(), float(norms.sum()).hex())
print("weights", [float(v).hex() for v in fc.weight.view(-1)], float(fc.bias).hex())
