"""Activation checkpointing: two blocks run under torch.utils.checkpoint (one
reentrant, one not), their forward run again inside backward(), dropout in
each (checkpoint replays the generator's state for the recomputation).
Block.forward starts 4 times a step: block1's and block2's forward, then inside
backward() block2's recomputation and block1's (its 12th start: the 3rd step's
block1, once block2's backward has added to the gradients)."""
# corpus-names: gradients, backward
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import corpus

torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.drop = nn.Dropout(0.2)

    def forward(self, x):
        h = self.fc(x)                                         # corpus: inside@12=torch
        return x + self.drop(torch.relu(h))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(6, 12)
        self.block1 = Block(12)
        self.block2 = Block(12)
        self.head = nn.Linear(12, 1)

    def forward(self, x):
        x = self.inp(x)
        x = checkpoint(self.block1, x, use_reentrant=False)
        x = checkpoint(self.block2, x, use_reentrant=True)
        return self.head(x)


def main():
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for step in range(12):
        x = torch.randn(16, 6)
        loss = (model(x) - x[:, :1]).pow(2).mean()             # corpus: before@3=cpu
        opt.zero_grad()
        loss.backward()
        corpus.grow()                                          # corpus: real@5
        opt.step()                                             # corpus: after@8=torch
        print(step, corpus.exact(loss))
    print("weights", corpus.digest(model.state_dict()))


if __name__ == "__main__":
    main()
