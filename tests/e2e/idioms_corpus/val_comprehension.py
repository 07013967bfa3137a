"""Training that keeps a snapshot of the weights each epoch, then scores every
snapshot on the validation set: a list comprehension over the (shuffled)
validation DataLoader inside evaluate(), as a train()/evaluate() pair writes it."""
# corpus-names: val_loader, comprehension, score, torch's default generator
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import corpus

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 12), nn.ReLU(), nn.Linear(12, 2))
opt = torch.optim.Adam(model.parameters(), lr=0.01)
train_loader = DataLoader(TensorDataset(torch.randn(48, 4), torch.randint(0, 2, (48,))), batch_size=8, shuffle=True)
val_loader = DataLoader(TensorDataset(torch.randn(30, 4), torch.randint(0, 2, (30,))), batch_size=5, shuffle=True)


def train_one_epoch():
    model.train()
    for x, y in train_loader:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss


def score(x, y):
    logits = model(x)                                                # corpus: inside@9=torch
    return (logits.argmax(1) == y).sum().item(), F.cross_entropy(logits, y, reduction="sum").item()


@torch.no_grad()
def evaluate():
    model.eval()
    scores = [score(x, y) for x, y in val_loader]
    return sum(c for c, _ in scores), sum(l for _, l in scores)


snapshots = []
for epoch in range(5):
    last = train_one_epoch()
    snapshots.append({k: v.clone() for k, v in model.state_dict().items()})
    print(epoch, corpus.exact(last))
for epoch, weights in enumerate(snapshots):
    model.load_state_dict(weights)
    correct, total_loss = evaluate()                                 # corpus: before@3=cpu
    corpus.grow()                                                    # corpus: real@4
    print(epoch, correct, total_loss.hex())                          # corpus: after@2=memory
print("weights", corpus.digest(model.state_dict()))
