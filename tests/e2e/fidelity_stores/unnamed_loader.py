# As loader_comprehension.py, but the DataLoader's name does not say it is one
# (`val`): nothing marks the loop's iterations, so an error inside the
# comprehension cannot be rolled back to the iteration's start; it is named.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def score(model, x, y):
    SIZES.append(len(x))            # a side effect of the callee: said in general words
    return nn.functional.mse_loss(model(x), y).item()


SIZES = []


def main():
    torch.manual_seed(2)
    model = nn.Linear(4, 1)
    val = DataLoader(TensorDataset(torch.randn(24, 4), torch.randn(24, 1)), batch_size=4, shuffle=True)
    for scale in range(4):
        losses = [score(model, x * scale, y) for x, y in val]
        print(scale, [v.hex() for v in losses])
    print("rand", torch.rand(1).item().hex())


main()
