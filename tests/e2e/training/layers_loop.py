# The innermost loop of the user's code is inside forward(), over the layers: its
# state holds activations in a live autograd graph, so Portal resumes at the
# training loop outside it instead.
import torch
from torch import nn

from common import digest


class Deep(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(6, 6) for _ in range(4))

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x.sum(dim=1)


torch.manual_seed(3)
model = Deep()
opt = torch.optim.Adam(model.parameters(), lr=0.01)
data = torch.randn(20, 8, 6)
for i, batch in enumerate(data):
    loss = (model(batch) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if i % 5 == 4:
        print("batch", i, round(loss.item(), 6))
print("weights", digest(model.state_dict()))
