# Validation written as a list comprehension over a DataLoader, after each
# epoch's training loop; and a generator expression summing the training loss.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def evaluate(model, x, y):
    return nn.functional.mse_loss(model(x), y).item()


def main(epochs=3):
    torch.manual_seed(2)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    val = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=8)
    for epoch in range(epochs):
        for x, y in train:
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
        with torch.no_grad():
            losses = [evaluate(model, x, y) for x, y in val]
            total = sum(evaluate(model, x, y) for x, y in train)
        print("epoch", epoch, f"{sum(losses) / len(losses):.6f}", f"{total:.6f}")


main()
