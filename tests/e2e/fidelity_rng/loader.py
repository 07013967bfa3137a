# Unmarked loops over a shuffled DataLoader in a torch program: the model's
# initialisation and each epoch's shuffle drew from torch's generator before the
# loop's iterations.  An evaluation loop draws nothing in its iterations: silent,
# exact.  A loop through a dropout layer in training mode draws in each iteration,
# through a call the name table cannot see (`model(x)`): named.
import sys

import torch
from torch.utils.data import DataLoader

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
data = [torch.randn(4) for _ in range(20)]
loader = DataLoader(data, batch_size=4, shuffle=True)
torch.set_grad_enabled(False)
if sys.argv[1] == "eval":
    model.eval()
    for epoch in range(2):
        for i, x in enumerate(loader):
            out = model(x)
            room = [0.0] * 8                   # line 21: evaluation
            print(epoch, i, out.sum().item())
else:
    model.train()
    for x in loader:
        out = model(x)
        room = [0.0] * 8                       # line 27: dropout drew
        print(out.sum().item())
print("after", torch.rand(2).tolist())
