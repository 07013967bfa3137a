"""Prints the memory limits the interpreter runs under, and whether CUDA starts."""
import resource
import sys

for name in ("RLIMIT_DATA", "RLIMIT_AS", "RLIMIT_RSS"):
    print(name, resource.getrlimit(getattr(resource, name)))
if sys.argv[1:] == ["cuda"]:
    import torch
    torch.zeros(1, device="cuda")
    print("cuda started", torch.cuda.get_device_name(0))
