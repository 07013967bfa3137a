# Iteration i makes a list of i numpy arrays of STEP MiB each: memory grows with i
# until an allocation fails.  The failing allocation is the iteration's first
# statement and the previous iteration's arrays are gone by then, so a resumed run
# redoes the iteration whole and needs no more than the largest list.  np.zeros maps
# untouched zero pages: the cap (RLIMIT_DATA) counts them, the machine barely does.
# With a third argument `write`, np.ones: every page written, the memory really
# used (what the resident cap, PORTAL_MEMORY_TRIPWIRE=resident, counts).
import sys

import numpy as np

MiB = 1 << 20
step = int(sys.argv[1]) if len(sys.argv) > 1 else 512
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
write = len(sys.argv) > 3 and sys.argv[3] == "write"
total = 0
for i in range(1, rounds + 1):
    parts = [(np.ones if write else np.zeros)(step * MiB, dtype=np.uint8) for _ in range(i)]
    for k, part in enumerate(parts):
        part[:: 64 * MiB] = k + i
        total += int(part[:: 64 * MiB].sum())
    print(f"round {i}: {len(parts) * step} MiB, total {total}", flush=True)
    del parts, part
print("done", total)
