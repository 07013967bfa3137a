# A training-shaped loop that needs a module installed only in the venv
# (onlyhere, written into its site-packages by the test).  The fake OOM hits
# the line marked [oom]; a resume continues from that iteration.
import sys

import onlyhere

print("start", sys.executable, sys.prefix, sys.base_prefix, onlyhere.WHERE, flush=True)
total = 0
for step in range(5):
    total += onlyhere.weight(step)  # [oom]
    print("step", step, total, flush=True)
print("end", sys.executable, sys.prefix, onlyhere.WHERE, total)
