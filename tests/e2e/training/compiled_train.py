# A model compiled with torch.compile (the backend is the first argument: inductor,
# torch's default, builds C++ kernels; aot_eager traces without compiling), trained
# in a plain loop.  What it prints at the end also says that the compiled path ran
# in this process: how many graphs Dynamo compiled here (0 had it run eagerly).
import sys

import torch
from torch import nn

from common import digest


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 32)
        self.out = nn.Linear(32, 1)

    def forward(self, x):
        h = torch.relu(self.inp(x))
        h = nn.functional.dropout(h, p=0.2, training=self.training)
        return self.out(h).squeeze(1)


def train(compiled, opt, data, target):
    for step, (x, y) in enumerate(zip(data, target)):
        loss = ((compiled(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("step", step, loss.item().hex())


torch.manual_seed(11)
model = Net()
compiled = torch.compile(model, backend=sys.argv[1])
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
train(compiled, opt, torch.randn(16, 4, 8), torch.randn(16, 4))
from torch._dynamo.utils import counters  # noqa: E402
print("compiled graphs", counters["stats"]["unique_graphs"])
print("weights", digest(model.state_dict()))
