import numpy as np

weights = np.arange(1 << 20, dtype=np.float64)  # 8 MiB: more than the disk has
for i in range(4):
    weights += 1  # [oom]
    print("i", i, float(weights[0]))
