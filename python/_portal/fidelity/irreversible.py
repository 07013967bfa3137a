"""What the failed iteration changed that a resume does not roll back, named.

The failed iteration runs again from its start after a resume.  Some of what it
did before the error stays done: an optimizer that already stepped (its weights
and moments are updated: they step again), an LR scheduler that stepped, the
running statistics a BatchNorm updated in place in its forward pass.  Portal
cannot undo these; it says so (suspend message, manifest, job record: `portal
show`), and `--policy oom.exact=true` makes such a loop decline (decide.py).

How it knows: the import patches below count each optimizer step (torch calls
`Optimizer._optimizer_step_code()` after every `step()`), each scheduler step,
and keep the BatchNorm modules made; the iteration marks (iteration.py) note the
count and the BatchNorm buffers' version counters when an iteration starts.  A
loop without marks (one whose body does not call `.backward()`) is not judged.
Not detected: other in-place changes of parameters or buffers (`p.data.mul_()`
of the program's own), which no hook sees at a cost a training step can pay.

Imports nothing but sys (and passthrough.py, which imports only sys) at the top
(plugins.import_patches()); it is imported at start-up and only then: the patches and the marks (iteration.py) hold it.
"""
import sys

from _portal.state.passthrough import drop_own_frame   # imports nothing but sys

_SERIAL = [0]      # one count for every event below
_LAST = []         # [WeakKeyDictionary: optimizer or scheduler -> serial of its last step]
_NORMS = []        # weak references to the BatchNorm modules, in order made


def _stepped(obj):
    _SERIAL[0] += 1
    if not _LAST:   # weakref: imported by torch by now, never by Portal's start-up
        import weakref
        _LAST.append(weakref.WeakKeyDictionary())
    try:
        _LAST[0][obj] = _SERIAL[0]
    except TypeError:
        pass


def _keep(module):
    import weakref
    _NORMS.append(weakref.ref(module))


def _patch_optimizer(module):
    cls = module.Optimizer
    if getattr(cls, "_portal_counted", False):
        return
    old = cls._optimizer_step_code

    def _optimizer_step_code(self):
        _stepped(self)
        try:
            return old(self)
        except BaseException as exc:
            drop_own_frame(exc)   # no frame of Portal's in the program's traceback
            raise
    _optimizer_step_code.__name__, _optimizer_step_code.__qualname__ = old.__name__, old.__qualname__
    _optimizer_step_code.__doc__, _optimizer_step_code.__wrapped__ = old.__doc__, old
    cls._optimizer_step_code = _optimizer_step_code
    cls._portal_counted = True


def _patch_schedulers(module):
    for cls in list(vars(module).values()):
        if not isinstance(cls, type) or "step" not in vars(cls) or cls.__module__ != module.__name__:
            continue
        if getattr(cls, "_portal_counted", False) or not (hasattr(cls, "get_lr") or
                                                          cls.__name__ == "ReduceLROnPlateau"):
            continue
        old = vars(cls)["step"]

        def step(self, *args, _old=old, **kwargs):
            try:
                result = _old(self, *args, **kwargs)
            except BaseException as exc:
                drop_own_frame(exc)   # no frame of Portal's in the program's traceback
                raise
            _stepped(self)
            return result
        step.__name__, step.__qualname__, step.__doc__, step.__wrapped__ = \
            old.__name__, old.__qualname__, old.__doc__, old
        cls.step = step
        cls._portal_counted = True


def _patch_batchnorm(module):
    cls = module._NormBase
    if getattr(cls, "_portal_counted", False):
        return
    init = cls.__init__
    setstate = cls.__setstate__   # nn.Module's, unless the class has its own

    def __init__(self, *args, **kwargs):
        try:
            init(self, *args, **kwargs)
        except BaseException as exc:
            drop_own_frame(exc)   # no frame of Portal's in the program's traceback
            raise
        _keep(self)

    def __setstate__(self, state):  # rebuilt by a resume (or a copy)
        try:
            setstate(self, state)
        except BaseException as exc:
            drop_own_frame(exc)
            raise
        _keep(self)
    for fn, old in ((__init__, init), (__setstate__, setstate)):
        fn.__name__, fn.__qualname__, fn.__doc__, fn.__wrapped__ = \
            old.__name__, old.__qualname__, old.__doc__, old
    cls.__init__, cls.__setstate__ = __init__, __setstate__
    cls._portal_counted = True


def import_patches():
    return {"torch.optim.optimizer": _patch_optimizer,
            "torch.optim.lr_scheduler": _patch_schedulers,
            "torch.nn.modules.batchnorm": _patch_batchnorm}


# --- the mark and the verdict -------------------------------------------------------------

def _version(module):
    """The version counter of what a training forward bumps: num_batches_tracked
    (`add_(1)`, counted); the running mean and variance are written by the C++
    kernel without bumping theirs."""
    stats = module.__dict__.get("_buffers", {}).get("num_batches_tracked")   # not nn.Module's slow __getattr__
    return stats._version if stats is not None else None


def note():
    """At an iteration's start (iteration.py): (serial, BatchNorm versions)."""
    if not _NORMS:
        return _SERIAL[0], ()
    return _SERIAL[0], tuple(_version(m) if m is not None else None for m in (r() for r in _NORMS))


def will_differ(loop_frame, loop_line, roots, saved=None, is_program_file=None):
    """[text] of what the current iteration of that loop changed irreversibly, in
    the state the checkpoint will hold (`saved`: the ids of its objects, from
    decide.py's trial; None: not known, all are taken).  An object the resume
    does not carry (an optimizer made in the iteration, a dead local there) is
    made again: it does not differ.  A loop without marks cannot tell what its
    failed iteration did: each stepped object of its state may have, unless
    nothing its body loads leads to it (``is_program_file``: the runtime's, which
    files are the program's; None: each may have)."""
    code = loop_frame.f_code
    iteration = sys.modules.get("_portal.fidelity.iteration")
    marks = iteration.marks_of(code, loop_line) if iteration is not None else None
    noted = (marks or {}).get("irreversible")
    serial, versions = noted if noted is not None else (None, ())

    def held(obj):
        return saved is None or id(obj) in saved
    out = []
    for last, _, obj in sorted((last, i, obj) for i, (obj, last) in enumerate(list(_LAST[0].items() if _LAST else ()))):
        if held(obj) and (serial is None or last > serial):   # in the order they stepped
            if serial is None and not _could_step(loop_frame, loop_line, obj, is_program_file):
                continue   # a validation loop: nothing its body loads leads to it
            out.append(_stepped_text(obj, roots, known=serial is not None))
    for i, version in enumerate(versions):
        m = _NORMS[i]() if i < len(_NORMS) else None
        if m is not None and held(m) and version is not None and _version(m) != version:
            out.append(f"the failed iteration had already updated the running statistics of "
                       f"{type(m).__name__} {_name(m, roots)} in place: they will be updated again")
    return out


def _could_step(loop_frame, loop_line, obj, is_program_file):
    """Could the failed iteration of that loop (without marks) have stepped obj?
    (step_reach.py; True where it cannot tell.)"""
    if is_program_file is None:
        return True
    from _portal.fidelity import step_reach
    return step_reach.could_step(loop_frame, loop_line, obj, is_program_file)


def _stepped_text(obj, roots, known=True):
    optim = sys.modules.get("torch.optim")
    if optim is not None and isinstance(obj, optim.Optimizer):
        step = getattr(obj, "_step_count", None)
        if step is None:
            steps = [s.get("step") for s in obj.state.values() if isinstance(s, dict) and "step" in s]
            step = int(max(float(s) for s in steps)) if steps else None
        what = f"optimizer {_name(obj, roots)}" + (f" (step {step})" if step is not None else "")
    else:
        at = f", step {obj.last_epoch}" if isinstance(getattr(obj, "last_epoch", None), int) else ""
        what = f"LR scheduler {_name(obj, roots)} ({type(obj).__name__}{at})"
    if known:
        return f"the failed iteration had already stepped {what}: it will step again"
    return (f"{what} has stepped, maybe in the failed iteration (this loop's iterations are not "
            f"marked: Portal cannot tell): it may step again")


def _name(obj, roots):
    """'opt', 'trainer.opt', 'model.bn1' ...: where the program holds it."""
    nn = sys.modules.get("torch.nn")
    is_module = nn is not None and isinstance(obj, nn.Module)

    def within(name, holder):
        """`name.sub` where `holder` is a module that has obj as its submodule `sub`."""
        if is_module and isinstance(holder, nn.Module):
            for sub, m in holder.named_modules():
                if m is obj and sub:
                    return f"'{name}.{sub}'"
        return None

    for root, value in roots.items():
        name = root.split("'")[1] if root.count("'") >= 2 else root
        if value is obj:
            return f"'{name}'"
        found = within(name, value)
        if found:
            return found
        attrs = getattr(value, "__dict__", None)
        if isinstance(attrs, dict) and not isinstance(value, type(sys)):
            for key, item in attrs.items():
                if item is obj:
                    return f"'{name}.{key}'"
                found = within(f"{name}.{key}", item)
                if found:
                    return found
    return f"(a {type(obj).__name__} inside the state)"
