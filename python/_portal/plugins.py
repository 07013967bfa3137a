"""What the capture and the restore take from Portal's plug-in modules.

A plug-in module saves the objects of one library or concern (open files, the
user's generators, torch's training state, DataLoader iterators ...) without the
pickler knowing about it.  It may define, all optional:

    reducers()          {type: fn(obj) -> reduce tuple | NotImplemented}, exact type
    subclass_reducers() {type: fn(obj) -> ...}, for that type and its subclasses
                        (the first class of the object's MRO listed wins)
    capture_process()   process-wide state to save (picklable), or None
    restore_process(s)  applies what capture_process() returned, before the
                        program's frames are re-entered
    import_patches()    {library module name: fn(module)}, run by the import hook
                        right after that module is executed (in a fresh run and in
                        a resumed one): to note state the capture will need
                        that the library does not keep (a patch must be cheap)

A plug-in for a library checks ``sys.modules`` and gives nothing when the program
never imported it: the capture must not import libraries the program did not.
"""
import importlib

# In the order their reducers are consulted (a later one wins for the same type).
MODULES = ("generators", "files", "torch_state", "dataloader", "tqdm_state", "logging_state")


def _modules():
    return [importlib.import_module(f"_portal.{name}") for name in MODULES]


def reducers():
    exact, inherited = {}, {}
    for mod in _modules():
        exact.update(getattr(mod, "reducers", dict)())
        inherited.update(getattr(mod, "subclass_reducers", dict)())
    return exact, inherited


def import_patches():
    patches = {}
    for mod in _modules():
        for name, patch in getattr(mod, "import_patches", dict)().items():
            previous = patches.get(name)
            patches[name] = patch if previous is None else _both(previous, patch)
    return patches


def _both(first, second):
    def patch(module):
        first(module)
        second(module)
    return patch


def capture_process():
    saved = {}
    for name, mod in zip(MODULES, _modules()):
        capture = getattr(mod, "capture_process", None)
        if capture is not None:
            state = capture()
            if state is not None:
                saved[name] = state
    return saved


def restore_process(saved):
    for name, mod in zip(MODULES, _modules()):
        if name in (saved or {}):
            mod.restore_process(saved[name])
