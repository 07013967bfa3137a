"""The globals torch.compile's Dynamo installed into user modules: left out of a checkpoint.

When Dynamo compiles a function it puts what its rewritten bytecode calls into the
function's module globals (`__compiled_fn_1`, `__resume_at_20_2`, `__import_torch`,
... - the names vary between torch versions) and notes each in a cleanup hook that
removes it when the rewritten code is collected.  They are Dynamo's cache, reached
only from that rewritten code (kept on the code object, which a checkpoint does not
save), and they hold what cannot be saved (weak references, compiled kernels).  The
resumed process compiles again on the first call and installs its own, so they are
left out - by the hooks' own record of what Dynamo installed, never by name, so a
global of the program's own is never dropped.

Who installed what is read from `torch._dynamo.utils.CleanupManager.instance`
(its `values`: id of the rewritten code -> [CleanupHook(scope, name)], the same in
torch 2.6 and 2.14); anything else there (another torch) leaves nothing out.
"""
import sys

_UTILS = "torch._dynamo.utils"


def installed():
    """frozenset of (id(module dict), name) that Dynamo installed and still holds."""
    utils = sys.modules.get(_UTILS)
    if utils is None:
        return frozenset()
    manager = getattr(getattr(utils, "CleanupManager", None), "instance", None)
    values = getattr(manager, "values", None)
    if not isinstance(values, dict):
        return frozenset()
    found = set()
    for hooks in list(values.values()):
        if not isinstance(hooks, (list, tuple)):
            continue
        for hook in hooks:
            scope, name = getattr(hook, "scope", None), getattr(hook, "name", None)
            if type(scope) is dict and type(name) is str and name in scope:
                found.add((id(scope), name))
    return frozenset(found)
