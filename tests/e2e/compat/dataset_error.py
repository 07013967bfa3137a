"""An error raised in a Dataset's __getitem__, reaching the program through the
DataLoader (argv[1]: num_workers; with a worker, torch re-raises it in the main
process with the worker's traceback as text)."""
import sys

import torch
from torch.utils.data import DataLoader, Dataset


class Items(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 5:
            raise ValueError(f"bad item {i}")
        return torch.tensor([float(i)])


loader = DataLoader(Items(), batch_size=2, num_workers=int(sys.argv[1]))
total = 0.0
for x in loader:
    total += float(x.sum())
    print("batch", total, flush=True)
