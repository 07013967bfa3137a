"""A step-counted loop over a DataLoader by next(), a new epoch started in the
StopIteration handler, as minGPT-style trainers write it."""
# corpus-names: epoch
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import corpus

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(3, 8)
        self.out = nn.Linear(8, 1)

    def forward(self, x):
        hidden = torch.tanh(self.inp(x))                      # corpus: inside@9=cpu
        return self.out(hidden)


loader = DataLoader(TensorDataset(torch.randn(20, 3), torch.randn(20, 1)), batch_size=6, shuffle=True)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
step, epoch, max_steps = 0, 0, 14
it = iter(loader)
while step < max_steps:
    try:
        x, y = next(it)
    except StopIteration:
        epoch += 1
        it = iter(loader)
        x, y = next(it)
    loss = F.mse_loss(model(x), y)                            # corpus: before@5=torch
    opt.zero_grad()
    loss.backward()
    corpus.grow()                                             # corpus: real@6
    opt.step()                                                # corpus: after@13=memory
    step += 1
    print(step, epoch, len(x), corpus.exact(loss))
print(f"{epoch + 1} epochs", corpus.digest(model.state_dict()))
