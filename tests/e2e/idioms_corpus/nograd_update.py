"""Logistic regression written from scratch in a train() function: two leaf
tensors, a hand-written update under torch.no_grad() (`p -= lr * p.grad`), the
gradients zeroed by `p.grad.zero_()` after it."""
# corpus-names: in place, gradients
import torch

import corpus

torch.manual_seed(0)
X = torch.randn(128, 3)
y = (X @ torch.tensor([1.5, -2.0, 0.5]) > 0).float()


def train(steps, lr=0.5):
    w = torch.zeros(3, requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    for step in range(steps):
        lo = (step * 16) % 128
        logits = X[lo:lo + 16] @ w + b                            # corpus: before@9=cpu
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, y[lo:lo + 16])
        loss.backward()
        with torch.no_grad():
            for p in (w, b):
                p -= lr * p.grad                                  # corpus: inside@22=torch
                p.grad.zero_()
        corpus.grow()                                             # corpus: real@8
        print(step, corpus.exact(loss))                           # corpus: after@12=memory
    return w, b


if __name__ == "__main__":
    w, b = train(24)
    print("weights", corpus.digest(w, b))
