# Mixed precision on the CPU as the PyTorch recipes write it: the forward pass
# under torch.autocast(bfloat16), backward outside it, gradients clipped,
# a validation pass under torch.no_grad() and a log line built under a
# contextlib.nullcontext() (the stand-in for "autocast if enabled else nothing").
import contextlib

import torch
from torch import nn

from common import digest


def train(steps=30, use_amp=True):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Dropout(0.2), nn.Linear(32, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data, target = torch.randn(8, 16, 16), torch.randint(0, 4, (8, 16))
    val_x, val_y = torch.randn(32, 16), torch.randint(0, 4, (32,))
    for step in range(steps):
        x, y = data[step % 8], target[step % 8]
        model.train()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=use_amp):
            logits = model(x)
            loss = nn.functional.cross_entropy(logits.float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 5 == 4:
            model.eval()
            with torch.no_grad():
                val_loss = nn.functional.cross_entropy(model(val_x), val_y)
            with contextlib.nullcontext():
                line = f"step {step} loss {loss.item():.6f} val {val_loss.item():.6f}"
            print(line)
    return model


if __name__ == "__main__":
    print("weights", digest(train().state_dict()))
