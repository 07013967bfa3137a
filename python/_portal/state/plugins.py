"""What the capture and the restore take from Portal's plug-in modules.

A plug-in module saves the objects of one library or concern (open files, the
user's generators, torch's training state, DataLoader iterators ...) without the
pickler knowing about it.  It may define, all optional:

    reducers(context)   {type: fn(obj) -> reduce tuple | NotImplemented}, exact type,
                        for one pickling: `context` (checkpoint/context.py) says
                        whether it is decide.py's trial and which iteration's
                        start the state is rolled back to
    subclass_reducers(context) {type: fn(obj) -> ...}, for that type and its
                        subclasses (the first class of the object's MRO listed wins)
    capture_process()   process-wide state to save (picklable), or None
    restore_process(s)  applies what capture_process() returned, before the
                        program's frames are re-entered
    will_differ(roots, saved) [text] of what will differ from python's run among the
                        objects its reducers saw in decide.py's trial pickling
                        (`saved`: the ids the trial pickled, None: unknown;
                        a `will differ:` line each; oom.exact=true declines)
    prepare()           called before decide.py's trial pickling, in the program's
                        thread (the pickler runs in one of Portal's own)
    at_suspension(saved) the suspension is decided (after will_differ() and the
                        oom.exact=true rule), before the checkpoint is written;
                        returns a reason to decline after all, or None
    import_patches()    {library module name: fn(module)}, run by the import hook
                        right after that module is executed (in a fresh run and in
                        a resumed one): to note state the capture will need
                        that the library does not keep (a patch must be cheap);
                        such a module is listed in PATCHING too

A plug-in for a library checks ``sys.modules`` and gives nothing when the program
never imported it: the capture must not import libraries the program did not.
"""
import sys

# In the order their reducers are consulted (a later one wins for the same type).
# submodules first: the library submodules the program reaches are imported again
# before any other plug-in rebuilds what may use them.
# Each under the name its process-wide state is saved as in a checkpoint
# (ProcessState.plugins: those names are part of the format), then its module.
MODULES = {
    "submodules": "state.submodules",
    "generators": "state.generators",
    "files": "state.files",
    "threading_state": "state.threading_state",
    "csv_state": "state.csv_state",
    "sqlite_state": "state.sqlite_state",
    "torch_state": "torch.objects",
    "dataloader": "torch.dataloader",
    "tqdm_state": "state.tqdm_state",
    "logging_state": "state.logging_state",
    "generator_states": "fidelity.generator_states",
    "iteration": "fidelity.iteration",
}
# Those that define import_patches().
PATCHING = ("torch.dataloader", "fidelity.irreversible", "fidelity.grads", "fidelity.rng_check")


def _load(name):
    # Not importlib: import_patches() runs at start-up, where Portal imports as
    # little as it can (what it imports is forgotten; the program imports its own).
    __import__(f"_portal.{name}")
    return sys.modules[f"_portal.{name}"]


def _modules():
    return [_load(path) for path in MODULES.values()]


def reducers(context=None):
    """(exact, inherited): every plug-in's reducers for one pickling, each plug-in
    handed `context` (checkpoint/context.PickleContext: a trial's, or the
    write's with the marks it rolls back to; a plain one by default)."""
    if context is None:
        from _portal.checkpoint.context import PickleContext
        context = PickleContext()
    exact, inherited = {}, {}
    for mod in _modules():
        exact.update(getattr(mod, "reducers", _none)(context))
        inherited.update(getattr(mod, "subclass_reducers", _none)(context))
    return exact, inherited


def _none(context):
    return {}


def import_patches():
    """Called at start-up, before the program runs: only the PATCHING modules are
    imported then.  What start-up imports is forgotten before the program starts
    (boot.py), and a module imported twice may have two versions of its types
    (mmap.mmap in 3.11): so these modules import nothing but sys at their top."""
    patches = {}
    for mod in [_load(path) for path in PATCHING]:
        for name, patch in getattr(mod, "import_patches", dict)().items():
            previous = patches.get(name)
            patches[name] = patch if previous is None else _both(previous, patch)
    return patches


def _both(first, second):
    def patch(module):
        first(module)
        second(module)
    return patch


def will_differ(roots, saved):
    out = []
    for mod in _modules():
        hook = getattr(mod, "will_differ", None)
        if hook is not None:
            out.extend(hook(roots, saved))
    return out


def prepare():
    for mod in _modules():
        getattr(mod, "prepare", _nothing)()


def at_suspension(saved):
    """The first reason a plug-in gives to decline after all, or None."""
    for mod in _modules():
        reason = getattr(mod, "at_suspension", _nothing)(saved)
        if reason:
            return reason
    return None


def _nothing(*_):
    return None


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
