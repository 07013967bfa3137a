"""DEVICE (argv[1]) tensors of argv[3] MiB in all, kept across a suspension.

The tensors are drawn from the device's generator in blocks of 256 MiB; each
step prints a checksum of every block (computed on the device), the digest of the
device generator's state, and a time stamp; when the file argv[2] holds STEP, step
STEP prints `oom at T` and asks for more memory than any machine has.  The
harness times the suspension from that stamp to the process's exit and the resume
to the step's line, and watches the interpreter's host memory meanwhile."""
import hashlib
import sys
import time

import torch

device, oom_file, total_mib = sys.argv[1], sys.argv[2], int(sys.argv[3])
BLOCK_MIB = 256
IMPOSSIBLE_BYTES = 1 << 50
torch.manual_seed(99)
if device == "cuda":
    torch.cuda.manual_seed_all(99)
blocks = []
for _ in range(max(1, total_mib // BLOCK_MIB)):
    blocks.append(torch.randn(BLOCK_MIB << 18, device=device))   # 4-byte floats
if device == "cuda":
    torch.cuda.synchronize()


def checksum(t):
    ints = t.view(torch.int32).to(torch.int64)
    return int(ints.sum()), int(ints[::3].sum()), int(ints[1::5].sum())


def rng_digest():
    state = torch.cuda.get_rng_state() if device == "cuda" else torch.get_rng_state()
    return hashlib.sha256(state.numpy().tobytes()).hexdigest()[:16]


def oom_step():
    try:
        with open(oom_file) as f:
            return int(f.read())
    except FileNotFoundError:
        return None


for step in range(3):
    sums = hashlib.sha256(repr([checksum(b) for b in blocks]).encode()).hexdigest()[:16]
    print(f"step {step} t {time.time():.3f} sums {sums} rng {rng_digest()}", flush=True)
    if oom_step() == step:
        print(f"oom at {time.time():.3f}", flush=True)
        hog = torch.empty(IMPOSSIBLE_BYTES, dtype=torch.uint8, device=device)
    blocks[step % len(blocks)].add_(torch.randn(BLOCK_MIB << 18, device=device))
print("done", flush=True)
