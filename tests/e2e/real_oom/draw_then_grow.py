"""A numpy loop that draws a block of random numbers, then allocates a buffer that
grows its state by STEP_MIB MiB a step up to TOTAL_MIB MiB: the iteration that
really runs out has already drawn, and its rerun after a resume must draw the same
numbers again (issue 26's simplest job).  Prints a line a step and a digest of the
final state.

    python3 draw_then_grow.py numpy STEP_MIB TOTAL_MIB
"""
import hashlib
import sys

import numpy as np

step_mib, total_mib = int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(3)
acc = np.zeros(1024)
kept = []
for step in range(total_mib // step_mib):
    block = rng.standard_normal(1024)                          # draws first
    kept.append(np.full((step_mib << 20) // 8, float(step)))    # then runs out here
    acc += block
    print("step", step, repr(float(acc.sum())), flush=True)

digest = hashlib.sha256(acc.tobytes() + rng.standard_normal(4).tobytes())
for x in kept:
    digest.update(x[:4].tobytes() + x[-4:].tobytes() + str(x.size).encode())
print(len(kept), digest.hexdigest())
