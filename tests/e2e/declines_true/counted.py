import torch
from torch.utils.data import DataLoader, TensorDataset
from tqdm import tqdm


def squares(n):
    for i in range(n):
        yield torch.full((2,), float(i * i))


loader = DataLoader(TensorDataset(torch.arange(40.0).view(20, 2)), batch_size=2)
total = 0.0
for epoch in range(2):
    for (x,) in tqdm(loader, mininterval=0, ascii=True):
        total += float(x.sum())
    for k, t in enumerate(squares(6)):
        total += float(t.sum()) * k
print(total)
