"""A state of a little more than 1 GiB (dense bytes: no holes), a loop, an output."""
import numpy as np

MIB = 1 << 20
data = np.ones(1100 * MIB, dtype=np.uint8)

for step in range(3):
    data[step * MIB] = step + 2          # FAKE-OOM here
print(int(data[::MIB].sum()), data.size)
