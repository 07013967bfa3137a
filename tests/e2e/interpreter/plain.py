# Needs nothing but the standard library; says which interpreter ran its end.
import sys

total = 0
for step in range(4):
    total += step  # [oom]
print("end", sys.executable, total)
