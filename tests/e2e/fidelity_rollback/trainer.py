# A Trainer class the way people write one: fit() -> _train_epoch() -> _step(); the
# step adds noise to its input (a draw before the forward), the model drops out (a
# draw inside the forward), and backward() is two calls below the loop.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from common import digest, exact, spike


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 32)
        self.drop = nn.Dropout(0.3)
        self.fc2 = nn.Linear(32, 2)

    def forward(self, x):
        h = self.drop(torch.relu(self.fc1(x)))
        h = h * 1.0
        return self.fc2(h)


class Trainer:
    def __init__(self, model, loader, epochs):
        self.model, self.loader, self.epochs = model, loader, epochs
        self.opt = torch.optim.Adam(model.parameters(), lr=0.01)
        self.loss_fn = nn.CrossEntropyLoss()
        self.step = 0

    def fit(self):
        for epoch in range(self.epochs):
            self._train_epoch(epoch)
        print("weights", digest(self.model.state_dict()))

    def _train_epoch(self, epoch):
        self.model.train()
        for batch in self.loader:
            loss = self._step(batch)
            self.step += 1
            print(f"epoch {epoch} step {self.step} loss {exact(loss)}")

    def _step(self, batch):
        x, y = batch
        x = x + 0.05 * torch.randn_like(x)
        out = spike(self.model(x))
        loss = self.loss_fn(out, y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.item()


def main():
    torch.manual_seed(0)
    x = torch.randn(48, 8)
    y = (x.sum(1) > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True)
    Trainer(Net(), loader, epochs=3).fit()


main()
