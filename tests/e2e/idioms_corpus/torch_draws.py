"""A noisy random walk over a table of counts, no backward(): torch.randn from
the default generator, torch.multinomial from a torch.Generator of its own."""
# corpus-names: random draws, generator, gen, table, state
import torch

import corpus

torch.manual_seed(0)
gen = torch.Generator().manual_seed(5)
probs = torch.softmax(torch.arange(10.0) / 3, 0)
table = torch.zeros(10)
state = torch.zeros(8)


def advance(state, noise, picks):
    drift = torch.randn(8) * 0.01
    moved = 0.9 * state + noise + drift                # corpus: inside@8=torch
    return moved + table[picks].mean() * 0.001


for step in range(12):
    noise = torch.randn(8)
    picks = torch.multinomial(probs, 4, replacement=True, generator=gen)
    state = advance(state, noise, picks)               # corpus: before@5=cpu
    table.index_add_(0, picks, torch.ones(4))          # corpus: after@6=torch
    corpus.grow()                                      # corpus: real@7
    print(step, corpus.exact(state), picks.tolist())
print("final", corpus.digest(state, table), torch.rand(1).item(), torch.rand(1, generator=gen).item())
