# Iteration i makes a list of i numpy arrays of STEP MiB each: memory grows with i
# until an allocation fails.  The failing allocation is the iteration's first
# statement and the previous iteration's arrays are gone by then, so a resumed run
# redoes the iteration whole and needs no more than the largest list.  np.ones writes
# every page as it allocates: the memory is really used, which is what the tripwire's
# cap counts (untouched zero pages are not: two_zeros.py).
import sys

import numpy as np

MiB = 1 << 20
step = int(sys.argv[1]) if len(sys.argv) > 1 else 512
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
total = 0
for i in range(1, rounds + 1):
    parts = [np.ones(step * MiB, dtype=np.uint8) for _ in range(i)]
    for k, part in enumerate(parts):
        part[:: 64 * MiB] = k + i
        total += int(part[:: 64 * MiB].sum())
    print(f"round {i}: {len(parts) * step} MiB, total {total}", flush=True)
    del parts, part
print("done", total)
