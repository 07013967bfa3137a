"""The kill-at-random trials' program (kill_random.py): a loop over a state of a
few dozen MiB (its checkpoint takes a moment to write), each iteration logged
by the process that ran it, the result printed at the end.

    counter.py ITERATIONS STATE_MIB STEP_SECONDS LOG
"""
import os
import sys
import time

iterations, mib, step, log = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
state = bytearray(mib << 20)
acc = 0
print("ready", flush=True)
for i in range(iterations):
    state[(i * 7919) % len(state)] = i % 251
    acc = (acc * 31 + i + state[(i * 104729) % len(state)]) % (1 << 61)
    time.sleep(step)
    with open(log, "a") as f:
        f.write(f"{os.getpid()} {i}\n")
print("result", acc, sum(state[::4096]), flush=True)
