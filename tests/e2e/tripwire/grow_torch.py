# Iteration i makes a list of i torch CPU tensors of STEP MiB each (see
# grow_numpy.py for the shape).  torch.empty leaves the pages untouched; only the
# elements read are written (with a third argument `write`, torch.ones writes them
# all).  torch 1.13 raises a RuntimeError ("can't allocate memory"), not a
# MemoryError.
import sys

import torch

MiB = 1 << 20
step = int(sys.argv[1]) if len(sys.argv) > 1 else 512
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
write = len(sys.argv) > 3 and sys.argv[3] == "write"
total = 0
for i in range(1, rounds + 1):
    parts = [(torch.ones if write else torch.empty)(step * MiB, dtype=torch.uint8) for _ in range(i)]
    for k, part in enumerate(parts):
        part[:: 64 * MiB] = k + i
        total += int(part[:: 64 * MiB].sum())
    print(f"round {i}: {len(parts) * step} MiB, total {total}", flush=True)
    del parts, part
print("done", total)
