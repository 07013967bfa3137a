"""An MLP trained the way people write it: Adam, a LambdaLR schedule, dropout,
gradient accumulation, a forward hook that counts calls, the epoch loop in main()
and the batch loop in train(epoch).  Prints the loss curve, then the number of
hook calls and a sha256 of every state_dict tensor's bytes (model and optimizer).
Lines the test suspends at end with a marker comment: # [name]
"""
import hashlib

import torch
from torch import nn

torch.set_num_threads(1)
torch.manual_seed(1234)

N, FEATURES, BATCH, ACCUM, EPOCHS = 192, 10, 16, 3, 3
data_gen = torch.Generator().manual_seed(7)
X = torch.randn(N, FEATURES, generator=data_gen)
Y = (X @ torch.randn(FEATURES, 1, generator=data_gen)).tanh() + 0.1 * torch.randn(N, 1, generator=data_gen)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(FEATURES, 32)
        self.drop = nn.Dropout(0.2)
        self.fc2 = nn.Linear(32, 1)

    def forward(self, x):
        h = torch.relu(self.fc1(x))  # [fc1]
        h = self.drop(h)
        return self.fc2(h)


model = MLP()
hook_calls = {"fc1": 0}
model.fc1.register_forward_hook(lambda module, inputs, output: hook_calls.__setitem__("fc1", hook_calls["fc1"] + 1))
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.95 ** step)
loss_fn = nn.MSELoss()
shuffle = torch.Generator().manual_seed(99)


def train(epoch):
    model.train()
    order = torch.randperm(N, generator=shuffle)
    for step, start in enumerate(range(0, N, BATCH)):  # [batches]
        idx = order[start:start + BATCH]
        xb, yb = X[idx], Y[idx]
        out = model(xb)  # [forward]
        loss = loss_fn(out, yb) / ACCUM
        loss.backward()  # [backward]
        if (step + 1) % ACCUM == 0:
            optimizer.step()
            optimizer.zero_grad()
            scheduler.step()
        print(f"epoch {epoch} step {step} loss {loss.item()!r} lr {scheduler.get_last_lr()[0]!r}")


def digest():
    h = hashlib.sha256()
    for state in (model.state_dict(), optimizer.state_dict()["state"]):
        for key, value in sorted(state.items()):
            tensors = value.values() if isinstance(value, dict) else [value]
            for t in tensors:
                if torch.is_tensor(t):
                    h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def main():
    for epoch in range(EPOCHS):  # [epochs]
        train(epoch)
        model.eval()
        with torch.no_grad():
            print(f"epoch {epoch} eval {loss_fn(model(X), Y).item()!r}")
    print(f"hook calls {hook_calls['fc1']}")
    print(f"state sha256 {digest()}")


main()
