# pytorch/examples' word_language_model, small: an LSTM language model whose hidden
# state is carried from batch to batch (`hidden = repackage_hidden(hidden)` at the
# top of the body, rebound by the forward), its gradients applied by hand.  A
# state bigger than what a mark keeps (`big`: `python rnn_hidden.py big`) is
# rebound the same way; `outer`: the epochs are a module-level loop around train().
import sys

import torch
from torch import nn

from common import digest, exact

torch.manual_seed(0)
VOCAB, BPTT, BATCH = 12, 6, 3
data = torch.randint(0, VOCAB, (BPTT * 8 + 1, BATCH))


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 8)
        self.rnn = nn.LSTM(8, 8, 2, dropout=0.2)
        self.out = nn.Linear(8, VOCAB)

    def forward(self, x, hidden):
        y, hidden = self.rnn(self.emb(x), hidden)
        return self.out(y).view(-1, VOCAB), hidden


def repackage_hidden(h):
    return h.detach() if isinstance(h, torch.Tensor) else tuple(repackage_hidden(v) for v in h)


def train(model, epochs, big):
    criterion = nn.CrossEntropyLoss()
    hidden = (torch.zeros(2, BATCH, 8), torch.zeros(2, BATCH, 8))
    if big:   # a state past what a mark keeps (1 MiB): named, not kept
        hidden = (hidden[0], hidden[1], torch.zeros(300_000))
    for epoch in range(epochs):
        for batch, i in enumerate(range(0, data.size(0) - 1, BPTT)):
            x, targets = data[i:i + BPTT], data[i + 1:i + 1 + BPTT].view(-1)
            hidden = repackage_hidden(hidden)
            model.zero_grad()
            output, state = model(x, hidden[:2])
            hidden = state + hidden[2:]
            loss = criterion(output, targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-0.5)
            print(epoch, batch, exact(loss))


if __name__ == "__main__":
    model = LM()
    if "outer" in sys.argv[1:]:
        for epoch in range(2):
            train(model, 1, "big" in sys.argv[1:])
    else:
        train(model, 2, "big" in sys.argv[1:])
    print("weights", digest(model.state_dict()))
