"""Trains a small regression model; run as `python3 -m pkg.train`."""
import os
import traceback

import torch
from torch import nn

from .model import make_model


def main(epochs=4, batches=6):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(11)
    xs, ys = torch.randn(batches, 8, 6, generator=g), torch.randn(batches, 8, 1, generator=g)
    for epoch in range(epochs):
        total = 0.0
        for i in range(batches):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(xs[i]), ys[i])
            loss.backward()
            opt.step()
            total += loss.item()
        print(f"epoch {epoch} loss {total / batches:.6f}")
    # what python's frames below the module's are (runpy's, under -m)
    print("stack", [(f.filename.rsplit("/", 1)[-1], f.lineno, f.name) for f in traceback.extract_stack()])
    print("doc", __doc__, __name__, __spec__.name, __package__)
    if os.environ.get("FAIL_AFTER"):
        raise ValueError("failed after training")
    return model


from common import digest  # noqa: E402  (the corpus' helper, on sys.path as the working directory)

print("weights", digest(main().state_dict()))
