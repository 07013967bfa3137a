"""Facts of the torch that the interpreter under test has, asked of it (never
assumed from one torch version)."""
import functools
import subprocess

from conftest import PYTHON

_OOM_NAME = """
import torch
oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
print(oom.__module__ + "." + oom.__qualname__)
"""


@functools.lru_cache(maxsize=None)
def oom_error_name():
    """How python's traceback names torch's out-of-memory error: torch 1.13's is
    torch.cuda.OutOfMemoryError, 2.x's torch.OutOfMemoryError (torch.cuda's name
    is an alias of it there)."""
    r = subprocess.run([PYTHON, "-c", _OOM_NAME], capture_output=True, timeout=120, check=True)
    return r.stdout.decode().strip()
