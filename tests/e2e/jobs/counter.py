# A loop that prints to both streams; it waits at step WAIT_AT (if set) until the
# file named by WAIT_FILE appears, so that a test can act while it runs.
import os
import sys
import time

total = 0
for step in range(6):
    if os.environ.get("WAIT_AT") == str(step):
        print("waiting", flush=True)
        while not os.path.exists(os.environ["WAIT_FILE"]):
            time.sleep(0.02)
    total += step * step
    print("step", step, total, flush=True)
    print("err", step, file=sys.stderr, flush=True)
print("total", total)
