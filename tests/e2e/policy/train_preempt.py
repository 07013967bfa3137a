"""A small seeded torch training loop that takes a few seconds: the preemption
tests send SIGTERM to portal-run at random moments of it, the retry tests make
its backward() run out of memory.  Prints each step's loss and, at the end, a
digest of every parameter's bytes."""
import hashlib
import os
import sys
import time

import torch

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 30
STEP_SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 0.1
# Steps whose update is left out after their forward pass: what a run under
# --policy oom.action=skip whose backward() ran out of memory there must give.
LEAVE_OUT = {int(x) for x in os.environ.get("TRAIN_LEAVE_OUT", "").split(",") if x}


def train(model, opt, data, target):
    for step in range(STEPS):
        idx = torch.randint(0, 64, (16,))
        loss = torch.nn.functional.mse_loss(model(data[idx]), target[idx])
        opt.zero_grad()
        if step in LEAVE_OUT:
            continue
        loss.backward()
        opt.step()
        time.sleep(STEP_SECONDS)
        print("step", step, f"{loss.item():.10f}", flush=True)


def main():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = torch.randn(64, 8)
    target = data.sum(dim=1, keepdim=True)
    print("ready", flush=True)
    train(model, opt, data, target)
    h = hashlib.sha256()
    for name, p in model.state_dict().items():
        h.update(name.encode())
        h.update(p.detach().numpy().tobytes())
    print("digest", h.hexdigest())


main()
