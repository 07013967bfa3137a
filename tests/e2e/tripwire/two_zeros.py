# Two untouched 3 GiB np.zeros in each round, beyond a 2G cap together and each
# alone: python is given them (zero pages the machine does not spend), and so is a
# program under the memory tripwire, which counts resident memory.
import numpy as np

GiB = 1 << 30
total = 0
for i in range(1, 3):
    a = np.zeros(3 * GiB, dtype=np.uint8)
    b = np.zeros(3 * GiB, dtype=np.uint8)
    a[:: 1 << 26] = i
    b[:: 1 << 26] = i + 1
    total += int(a[:: 1 << 26].sum()) + int(b[:: 1 << 26].sum())
    print(f"round {i}: {(a.nbytes + b.nbytes) >> 20} MiB, total {total}", flush=True)
    del a, b
print("done", total)
