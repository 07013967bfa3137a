# A loop while a torch.distributed process group (gloo, world size 1) is initialised.
import os
import sys

import torch
import torch.distributed as dist

# Debian's torch 2.x is built without libuv, which its TCP store asks for by default.
os.environ.setdefault("USE_LIBUV", "0")
dist.init_process_group("gloo", rank=0, world_size=1, init_method=f"tcp://127.0.0.1:{sys.argv[1]}")
t = torch.ones(2)
for i in range(3):
    dist.all_reduce(t)
    t = t + i               # line 14: the fake OOM
print(t.tolist())
