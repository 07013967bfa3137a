# A DataLoader loop inside an epoch loop: the report counts as the program does.
import torch
from torch.utils.data import DataLoader, TensorDataset

data = DataLoader(TensorDataset(torch.arange(12.0)), batch_size=2)
seen = []


def train():
    for epoch in range(3):
        for (batch,) in data:
            seen.append(batch.sum().item())    # line 12: the fake OOM


train()
print(seen)
