# A DataLoader with two worker processes; the job is suspended in the middle of
# an epoch, its workers still running.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(4)
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(64, 3), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=4, num_workers=2)
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
        print("epoch", epoch, f"{loss.item():.6f}")


# The guard as DataLoader's docs ask for it: CPython 3.14 starts workers through a
# forkserver (its new default), which imports this script again; without the guard
# python3.14 itself fails here.
if __name__ == "__main__":
    main()
