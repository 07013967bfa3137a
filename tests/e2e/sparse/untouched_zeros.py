"""Two big np.zeros arrays the program barely touches, and a little real data.

Under python it runs to completion; under portal-run a (fake) out-of-memory
error in the loop suspends it, and its checkpoint holds only the touched bytes.
Prints what determines the arrays exactly (the positions and values of their
non-zero elements), and its peak memory on stderr."""
import hashlib
import sys

import numpy as np

GIB = 1 << 30
SIZE_GIB = int(sys.argv[1]) if len(sys.argv) > 1 else 3

a = np.zeros(SIZE_GIB * GIB, dtype=np.uint8)
b = np.zeros(SIZE_GIB * GIB // 8, dtype=np.float64)
data = np.arange(1 << 20, dtype=np.int64) * 7919 % 1000003      # 8 MiB, dense

total = 0
for step in range(5):
    a[step * 100000007 % a.size] = step + 1                     # one page per step
    b[-1 - step * 12345] = step * 0.5
    total += int(data[step::1000].sum())                        # FAKE-OOM here

nonzero_a = np.flatnonzero(a)
nonzero_b = np.flatnonzero(b)
print(total, a.size, b.size)
print(nonzero_a.tolist(), a[nonzero_a].tolist())
print(nonzero_b.tolist(), b[nonzero_b].tolist())
print(hashlib.sha256(data.tobytes()).hexdigest())
with open("/proc/self/status") as f:
    peak = [line.split()[1] for line in f if line.startswith("VmHWM:")][0]
print(f"peak_kib {peak}", file=sys.stderr)
