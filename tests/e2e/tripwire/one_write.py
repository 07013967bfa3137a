# Round 2 allocates one SIZE MiB array and writes it at once (np.ones): larger than
# a 512M cap (256 MiB), it grows past the cap within the one allocation, between two looks of
# the tripwire's watcher.  The array is gone by the end of the round.
import sys

import numpy as np

MiB = 1 << 20
size = int(sys.argv[1]) if len(sys.argv) > 1 else 384
# "fill": np.zeros (calloc, zero pages the allocation check lets through) filled in
# one C call, instead of np.ones (malloc, which the check refuses past the cap).
fill = len(sys.argv) > 2 and sys.argv[2] == "fill"
total = 0
for i in range(1, 5):
    n = (size if i == 2 else 16) * MiB
    if fill:
        block = np.zeros(n, dtype=np.uint8)
        block.fill(1)
    else:
        block = np.ones(n, dtype=np.uint8)
    total += int(block.sum()) + i
    print(f"round {i}: {block.nbytes >> 20} MiB, total {total}", flush=True)
    del block
print("done", total)
