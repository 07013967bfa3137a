"""Library submodules the program reaches as attributes of their package (a plug-in,
see plugins.py).

`import torch.utils.checkpoint` binds `torch` and makes `checkpoint` an attribute
of `torch.utils`; the program then calls `torch.utils.checkpoint.checkpoint(...)`.
A checkpoint saves a library module by name (reducers.py: `torch`), and the resume
imports that name only: `torch.utils` would have no attribute `checkpoint` in the
new process, and the program fails where python's run did not.

So the capture notes every library submodule that is an attribute of its loaded
parent package (the program could reach it that way), and the restore imports
those the new process has not, in the order they were loaded, under a package
the restored state imported again, before the program's frames run again.  The program's own modules are restored by value
(reducers.py), never imported here; Portal's own are not the program's.  A
submodule that no longer imports is left out, as python leaves a failed import
out of its package: the program meets the AttributeError python would give it
there.
"""
import importlib
import sys

from _portal.checkpoint import reducers as _reducers   # not `reducers`: plugins.py reads that name
from _portal.checkpoint.stream_words import is_portal as _is_portal   # Portal's own module names


def capture_process():
    users = {id(m) for m in _reducers.user_modules().values()}
    names = []
    for name, module in list(sys.modules.items()):
        parent, dot, child = name.rpartition(".")
        if not dot or _is_portal(name) or id(module) in users:
            continue
        package = sys.modules.get(parent)
        if package is None or id(package) in users:
            continue
        try:
            reached = package.__dict__.get(child) is module
        except Exception:        # a module object without a plain __dict__: not ours to judge
            continue
        if reached:
            names.append(name)
    return names or None


def restore_process(names):
    for name in names:
        # Only under a package the restored state imported again: a library the
        # program no longer holds is not imported for nothing.
        if name in sys.modules or name.partition(".")[0] not in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except Exception:        # gone from this installation: as python leaves it out
            pass
