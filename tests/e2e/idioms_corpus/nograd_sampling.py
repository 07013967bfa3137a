"""A tiny bigram language model trained on a string, sampled every few steps
by a function under @torch.no_grad() that draws each next character by
torch.multinomial with a generator of its own."""
# corpus-names: random draws, gen, sample, idx
import torch
import torch.nn.functional as F
from torch import nn

import corpus

torch.manual_seed(0)
text = "the quick brown fox jumps over the lazy dog " * 4
chars = sorted(set(text))
ids = torch.tensor([chars.index(c) for c in text])
model = nn.Embedding(len(chars), len(chars))
opt = torch.optim.Adam(model.parameters(), lr=0.1)
gen = torch.Generator().manual_seed(42)


@torch.no_grad()
def sample(start, n):
    idx = torch.tensor([start])
    out = []
    for _ in range(n):
        probs = F.softmax(model(idx)[-1] / 0.8, -1)
        idx = torch.multinomial(probs, 1, generator=gen)
        out.append(chars[idx.item()])                         # corpus: inside@21=cpu
    return "".join(out)


for step in range(12):
    if step % 3 == 2:
        text = sample(step % len(chars), 10)                             # corpus: before@2=memory
        corpus.grow()                                                    # corpus: real@3
        print("sample", repr(text))                                      # corpus: after@3=memory
    pos = torch.randint(0, len(ids) - 17, (4,))
    x = torch.stack([ids[p:p + 16] for p in pos])
    y = torch.stack([ids[p + 1:p + 17] for p in pos])
    loss = F.cross_entropy(model(x).view(-1, len(chars)), y.view(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(step, corpus.exact(loss))
print("weights", corpus.digest(model.state_dict()))
