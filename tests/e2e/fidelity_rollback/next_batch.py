# minGPT's Trainer.run: `while True`, the batch taken by next() inside the body, a new
# iterator made when the last one runs out; dropout in the model.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from common import digest, exact

MAX_ITERS = 30


class Trainer:
    def __init__(self, model, dataset):
        self.model = model
        self.loader = DataLoader(dataset, batch_size=4, shuffle=True)
        self.opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        self.iter_num = 0

    def run(self):
        model = self.model
        model.train()
        data_iter = iter(self.loader)
        while True:
            try:
                batch = next(data_iter)
            except StopIteration:
                data_iter = iter(self.loader)
                batch = next(data_iter)
            x, y = batch
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            model.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
            print(f"iter {self.iter_num} batch {exact(x)} loss {exact(loss)}")
            self.iter_num += 1
            if self.iter_num >= MAX_ITERS:
                break


torch.manual_seed(0)
X = torch.randn(40, 6)
Y = (X[:, 0] > 0).long()
net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.25), nn.Linear(16, 2))
Trainer(net, TensorDataset(X, Y)).run()
print("weights", digest(net.state_dict()))
