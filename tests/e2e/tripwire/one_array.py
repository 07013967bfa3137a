# Round 2 asks for one 2.20 GiB numpy array written at once (np.ones): under
# --mem 1G (a cap of 768 MiB) it fails inside numpy, whose error names its size
# ("Unable to allocate 2.20 GiB"); python is given it.
import numpy as np

total = 0
for i in range(1, 4):
    block = np.ones(int(2.2 * (1 << 30)) if i == 2 else 16 << 20, dtype=np.uint8)
    total += int(block[::4096].sum()) + i
    print(f"round {i}: {block.nbytes >> 20} MiB, total {total}", flush=True)
    del block
print("done", total)
