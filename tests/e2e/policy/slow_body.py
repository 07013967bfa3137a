"""A loop whose second iteration spends a long time in one call (a library's
long operation): no iteration starts within a short --preempt-grace."""
import time

print("ready", flush=True)
for i in range(3):
    time.sleep(0.2 if i == 0 else 30)
    print("iteration", i, flush=True)
