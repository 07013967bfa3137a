"""Early stopping: each epoch trains, validates, saves the best model with
torch.save and appends a line to a log file; stops when the validation loss
has not improved for `patience` epochs.  At the end the files are printed."""
# corpus-names: best.pt, train.log, log, bad_epochs, best, opt
# corpus-declines: inside: its state holds global 'loss' (torch.Tensor): a tensor in a live autograd graph

import torch
import torch.nn.functional as F
from torch import nn

import corpus

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(3, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr=0.05)
xs, xv = torch.randn(64, 3), torch.randn(32, 3)
ys, yv = xs.prod(1, keepdim=True), xv.prod(1, keepdim=True)
best, bad_epochs, patience = float("inf"), 0, 3
log = open("train.log", "w")
for epoch in range(40):
    model.train()
    for i in range(0, 64, 16):
        loss = F.mse_loss(model(xs[i:i + 16]), ys[i:i + 16])
        opt.zero_grad()
        loss.backward()                                          # corpus: inside@10=cpu
        opt.step()
    model.eval()
    with torch.no_grad():
        val = F.mse_loss(model(xv), yv).item()                   # corpus: before@4=torch
    if val < best:
        best, bad_epochs = val, 0
        torch.save(model.state_dict(), "best.pt")
    else:
        bad_epochs += 1
    log.write(f"{epoch} {val.hex()} {bad_epochs}\n")
    log.flush()
    corpus.grow()                                                # corpus: real@5
    print(epoch, val.hex(), bad_epochs)                          # corpus: after@3=memory
    if bad_epochs >= patience:
        break
log.close()
with open("train.log") as f:
    print(f.read(), end="")
state = torch.load("best.pt")
print("best", best.hex(), corpus.digest(state))
