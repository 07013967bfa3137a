"""A small training loop in the ways people zero gradients (argv):
PATTERN  zero_first: zero_grad() first in the body; zero_last: after the step,
         at the end of the body; accum: backward every micro-batch, step and
         zero_grad every 4th
TO_NONE  1: zero_grad(set_to_none=True), 0: zeroed in place
WHO      opt: optimizer.zero_grad(), net: module.zero_grad(), none: no optimizer, a
         hand-written SGD step that sets each gradient to None
CKPT     1: the middle block under torch.utils.checkpoint (recomputed inside
         backward), 0: plain
The custom Function Probe sits between the first layer and the middle block: a
fake out-of-memory error on its backward's line is raised inside backward, after
the gradients of the last layer (and the middle block) were accumulated and
before the first layer's."""
import hashlib
import os
import sys

import torch
from torch.utils.checkpoint import checkpoint

PATTERN, TO_NONE, WHO, CKPT = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4] == "1"
torch.manual_seed(0)
torch.set_num_threads(1)


class Probe(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        grad = grad * 1.0
        spike()
        return grad


_CALLS = [0]


def spike():
    """A real out-of-memory error inside backward, for a run under `portal-run --mem`:
    the SPIKE_AT-th call asks for SPIKE_MIB of memory (left untouched), more than
    the cap leaves; the count is saved with the job, so the rerun does not ask."""
    _CALLS[0] += 1
    if str(_CALLS[0]) == os.environ.get("SPIKE_AT"):
        scratch = torch.empty(int(os.environ.get("SPIKE_MIB", "3072")) << 20, dtype=torch.uint8)
        del scratch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 16)
        self.c = torch.nn.Linear(16, 1)

    def block(self, h):
        return torch.tanh(self.b(h))

    def forward(self, x):
        h = Probe.apply(torch.relu(self.a(x)))
        if CKPT:
            h = checkpoint(self.block, h, use_reentrant=True)
        else:
            h = self.block(h)
        return self.c(h)


def digest(model):
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def main():
    g = torch.Generator().manual_seed(1)
    data, target = torch.randn(48, 8, generator=g), torch.randn(48, 1, generator=g)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9) if WHO != "none" else None
    zeroer = opt if WHO == "opt" else net
    every = 4 if PATTERN == "accum" else 1
    for step in range(12):
        x, y = data[4 * step:4 * step + 4], target[4 * step:4 * step + 4]
        if str(step) == os.environ.get("SKIP"):   # python's run of oom.action=skip's result
            continue
        if PATTERN == "zero_first":
            zeroer.zero_grad(set_to_none=TO_NONE)
        loss = ((net(x) - y) ** 2).mean() / every
        loss.backward()
        after = loss.detach()
        if step % every == every - 1 and WHO == "none":
            with torch.no_grad():
                for p in net.parameters():
                    p -= 0.05 * p.grad
                    p.grad = None
        elif step % every == every - 1:
            opt.step()
            if PATTERN != "zero_first":
                zeroer.zero_grad(set_to_none=TO_NONE)
    print(digest(net), flush=True)


main()
