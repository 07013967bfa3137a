# Iteration i makes a list of i bytes objects of STEP MiB each (see grow_numpy.py for
# the shape): bytes(n) comes from calloc, untouched zero pages; with a third
# argument `write`, b"\x01" * n, every page written.
import sys

MiB = 1 << 20
step = int(sys.argv[1]) if len(sys.argv) > 1 else 512
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
write = len(sys.argv) > 3 and sys.argv[3] == "write"
total = 0
for i in range(1, rounds + 1):
    parts = [(b"\x01" * (step * MiB) if write else bytes(step * MiB)) for _ in range(i)]
    total += sum(len(p) // MiB + i for p in parts)
    print(f"round {i}: {len(parts) * step} MiB, total {total}", flush=True)
    del parts
print("done", total)
