# An LSTM language model trained with truncated back-propagation through time:
# the hidden state is carried across batches and detached at the start of each.
import torch
from torch import nn

from common import digest

torch.manual_seed(1)
VOCAB, HIDDEN, BPTT = 17, 12, 6
text = torch.randint(0, VOCAB, (400,))


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.lstm = nn.LSTM(HIDDEN, HIDDEN)
        self.out = nn.Linear(HIDDEN, VOCAB)

    def forward(self, x, hidden):
        y, hidden = self.lstm(self.embed(x).unsqueeze(1), hidden)
        return self.out(y.squeeze(1)), hidden


model = LM()
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
hidden = (torch.zeros(1, 1, HIDDEN), torch.zeros(1, 1, HIDDEN))
losses = []
for start in range(0, len(text) - BPTT - 1, BPTT):
    hidden = tuple(h.detach() for h in hidden)
    x, y = text[start:start + BPTT], text[start + 1:start + BPTT + 1]
    logits, hidden = model(x, hidden)
    loss = nn.functional.cross_entropy(logits, y)
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    losses.append(round(loss.item(), 6))
print("losses", losses[::8])
print("weights", digest(model.state_dict()))
