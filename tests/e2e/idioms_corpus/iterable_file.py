"""An IterableDataset that reads a CSV file line by line, batched by a
DataLoader, over several epochs (the file written first by the script)."""
# corpus-names: LinesDataset, loader, points.csv, opt
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, IterableDataset

import corpus

torch.manual_seed(0)
with open("points.csv", "w") as f:
    for i in range(44):
        a, b = (i * 7 % 13) / 13, (i * 5 % 11) / 11
        f.write(f"{a},{b},{a * 2 - b}\n")


class LinesDataset(IterableDataset):
    def __init__(self, path):
        self.path = path

    def __iter__(self):
        with open(self.path) as f:
            for line in f:
                a, b, y = map(float, line.split(","))           # corpus: inside@30=memory
                yield torch.tensor([a, b]), torch.tensor([y])


loader = DataLoader(LinesDataset("points.csv"), batch_size=8)
model = nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.2)
for epoch in range(3):
    for x, y in loader:
        loss = F.mse_loss(model(x), y)                           # corpus: before@5=torch
        opt.zero_grad()
        loss.backward()
        corpus.grow()                                            # corpus: real@8
        opt.step()                                               # corpus: after@9=cpu
        print(epoch, len(x), corpus.exact(loss))
print("weights", corpus.digest(model.state_dict()))
