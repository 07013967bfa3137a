"""pytorch/examples' regression: a polynomial fitted by a module-level loop
that draws its batch, zeroes the model's gradients, and applies them by hand
(`param.data.add_(-lr * param.grad)`, no optimizer) until the loss is small."""
# corpus-names: in place
from itertools import count

import torch
import torch.nn.functional as F

import corpus

torch.manual_seed(0)
W_target = torch.randn(4, 1) * 5
b_target = torch.randn(1) * 5


def get_batch(batch_size=32):
    x = torch.randn(batch_size).unsqueeze(1)
    x = torch.cat([x ** i for i in range(1, 5)], 1)
    return x, x.mm(W_target) + b_target.item()


fc = torch.nn.Linear(4, 1)
for batch_idx in count(1):
    batch_x, batch_y = get_batch()
    fc.zero_grad()
    output = F.smooth_l1_loss(fc(batch_x), batch_y)              # corpus: before@40=cpu
    loss = output.item()
    output.backward()
    for param in fc.parameters():
        param.data.add_(-0.1 * param.grad)                       # corpus: inside@81=torch
    corpus.grow()                                                # corpus: real@30
    if batch_idx % 10 == 0:                                      # corpus: after@42=memory
        print(batch_idx, corpus.exact(loss))
    if loss < 1e-2 or batch_idx == 60:
        break
print("weights", corpus.digest(fc.state_dict()), batch_idx)
