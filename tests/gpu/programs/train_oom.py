"""A small training loop on DEVICE (argv[1]: cuda or cpu) that runs out of memory.

Each step draws its batch from the device's default generator, trains a two-layer
model with SGD + momentum and prints the step, the loss's bits and a digest of
the device generator's state.  When the file named by argv[2] exists and holds
STEP, step STEP first asks for far more memory than any machine has: a real
torch.OutOfMemoryError on CUDA (the CPU allocator's RuntimeError on the CPU).  The
harness removes the file before resuming, as a user would make room."""
import hashlib
import os
import struct
import sys

import torch

device, oom_file, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.manual_seed(1234)
if device == "cuda":
    torch.cuda.manual_seed_all(1234)
torch.use_deterministic_algorithms(True)
# far beyond any device or host: 1 PiB
IMPOSSIBLE_BYTES = 1 << 50
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.Tanh(),
                            torch.nn.Linear(512, 1)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def rng_digest():
    state = torch.cuda.get_rng_state() if device == "cuda" else torch.get_rng_state()
    return hashlib.sha256(state.numpy().tobytes()).hexdigest()[:16]


def oom_step():
    try:
        with open(oom_file) as f:
            return int(f.read())
    except FileNotFoundError:
        return None


for step in range(steps):
    print(f"step {step} rng {rng_digest()}", flush=True)
    if oom_step() == step:
        print("oom now", flush=True)
        hog = torch.empty(IMPOSSIBLE_BYTES, dtype=torch.uint8, device=device)
    x = torch.randn(64, 256, device=device)
    y = x.sum(dim=1, keepdim=True).sin()
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    bits = struct.unpack("<I", struct.pack("<f", loss.item()))[0]
    print(f"step {step} loss {bits:08x}", flush=True)

digest = hashlib.sha256()
for p in model.parameters():
    digest.update(p.detach().cpu().numpy().tobytes())
print("params", digest.hexdigest(), flush=True)
