# A 50 MB temporary that is dead where the loop resumes (written before it is read
# in the body) is not saved; a live one of the same size is.
import sys


def work(mode, n):
    if mode == "live":
        keep = bytes(50_000_000)
    elif mode == "live_numpy":
        import numpy as np
        keep = np.ones(50_000_000 // 8)
    else:
        keep = b""
    total = 0
    for i in range(n):  # [loop]
        marker = i  # [oom]
        tmp = bytearray(50_000_000)
        tmp[i] = 7 + marker
        total += sum(tmp[:10])
        print("iteration", i, total)
    print("kept", len(keep))
    return total


print(work(sys.argv[1], 4))
