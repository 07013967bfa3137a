"""Truncated back-propagation through time: a GRU language model whose hidden state
is carried across batches and detached at the start of each one.  At a suspension
the hidden state still has the previous batch's graph, already consumed by its
backward(): it is saved as a leaf with its values.  Prints the loss curve and a
sha256 of the model's and optimizer's tensors.
Lines the test suspends at end with a marker comment: # [name]
"""
import hashlib

import torch
from torch import nn

torch.set_num_threads(1)
torch.manual_seed(3)
VOCAB, HIDDEN, SEQ, BATCH, STEPS = 20, 16, 8, 4, 12
text = torch.randint(0, VOCAB, (BATCH, SEQ * STEPS + 1), generator=torch.Generator().manual_seed(5))


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.rnn = nn.GRU(HIDDEN, HIDDEN, batch_first=True)
        self.out = nn.Linear(HIDDEN, VOCAB)

    def forward(self, x, h):
        y, h = self.rnn(self.embed(x), h)
        return self.out(y), h


model = LM()
optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
hidden = torch.zeros(1, BATCH, HIDDEN)
for step in range(STEPS):  # [steps]
    hidden = hidden.detach()  # [detach]
    x = text[:, step * SEQ:(step + 1) * SEQ]
    y = text[:, step * SEQ + 1:(step + 1) * SEQ + 1]
    logits, hidden = model(x, hidden)
    loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item()!r}")

h = hashlib.sha256()
for t in list(model.state_dict().values()) + [s["momentum_buffer"] for s in optimizer.state.values()]:
    h.update(t.detach().contiguous().numpy().tobytes())
print(f"state sha256 {h.hexdigest()}")
