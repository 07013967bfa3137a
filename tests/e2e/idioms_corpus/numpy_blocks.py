"""The simplest numpy job: a module-level default_rng, a loop that draws a block,
summarises it, then needs a buffer (a real shortage there), then adds the
summary to its running totals."""
# corpus-names: random draws, rng
import numpy as np

import corpus

rng = np.random.default_rng(3)


def summarise(block):
    centred = block - block.mean(axis=0)
    cov = centred.T @ centred / len(block)                  # corpus: inside@4=memory
    return np.linalg.eigvalsh(cov)


totals = []
for step in range(10):
    block = rng.standard_normal((64, 8))
    noise = rng.uniform(0.0, 0.1)
    spectrum = summarise(block + noise)                     # corpus: before@3=memory
    corpus.grow()                                           # corpus: real@6
    top = spectrum[-1]                                      # corpus: after@8=memory
    totals = totals + [top]
    print(step, corpus.exact(top), corpus.exact(spectrum))
print("totals", corpus.digest(np.array(totals)), rng.random())
