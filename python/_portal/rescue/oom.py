"""What counts as out of memory (the product page's list).

- Python's MemoryError and its subclasses (numpy raises one);
- PyTorch's OutOfMemoryError, under each name a torch version has
  (torch.cuda.OutOfMemoryError in 1.13, torch.OutOfMemoryError later);
- a RuntimeError that says "CUDA out of memory", or torch's CPU allocator's
  "can't allocate memory" (torch 1.13 raises a plain RuntimeError there).
Nothing else is ever touched.
"""
import sys

_MESSAGES = ("CUDA out of memory", "DefaultCPUAllocator: can't allocate memory")


def _torch_oom_types():
    torch = sys.modules.get("torch")  # never import torch for a program that did not
    if torch is None:
        return ()
    found = []
    for owner in (torch, getattr(torch, "cuda", None)):
        t = getattr(owner, "OutOfMemoryError", None)
        if isinstance(t, type):
            found.append(t)
    return tuple(found)


def is_out_of_memory(exc):
    if isinstance(exc, MemoryError):
        return True
    if not isinstance(exc, Exception):
        return False
    torch_types = _torch_oom_types()
    if torch_types and isinstance(exc, torch_types):
        return True
    if isinstance(exc, RuntimeError):
        text = str(exc)
        return any(m in text for m in _MESSAGES)
    return False
