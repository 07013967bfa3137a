"""Gradients a failed iteration's backward() had already written (issue 26).

An out-of-memory error inside or after `loss.backward()` leaves the gradients
the backward had accumulated so far in the parameters' `.grad`; the iteration
runs again after a resume and its backward adds the same micro-batch once more.
So, for the resume loop's failed iteration, where a backward ran in it (wholly
or partly):

  - a parameter whose gradient was None when the iteration's first backward
    started gets None back; one whose gradient was the tensor a `zero_grad()`
    had zeroed since the backward before gets that tensor back, zero;
  - a parameter whose gradient held something else then (gradient accumulation:
    the micro-batches before this one) and that the backward changed cannot be
    put back without a copy of every gradient at every iteration: it is named,
    `will differ: the failed iteration's backward() had already added to the
    gradients of N parameters: that micro-batch will count twice`, and
    `--policy oom.exact=true` declines such a point (decide.py).

How it knows, cheaply:
  - `Optimizer.zero_grad` and `Module.zero_grad` are wrapped to note when each
    optimizer or module last zeroed, and how (set_to_none); `Optimizer.__init__`
    and a resumed optimizer (torch/objects.py) register the optimizer;
  - every backward reaches the C++ engine through `Variable._execution_engine`
    (`torch.autograd.backward`, `Tensor.backward`, the recomputation of a
    `torch.utils.checkpoint` block, `torch.autograd.grad`): a property on its
    metaclass counts each access and returns the engine.  Being a property that
    has returned before the engine runs, it adds no frame to a traceback raised
    inside backward;
  - each iteration mark (iteration.py) holds a `holder`, shared by the marks
    taken since the last backward (an outer loop's and an inner loop's); the first
    backward after them notes, into it, each known optimizer's (and zeroed
    module's) parameters: (parameter, its grad, the grad's version, whether that
    grad was zeroed since the previous backward).  One short loop over the
    parameters per iteration; nothing per step of the engine.

At the rescue (suspend.py, once the point is chosen, before the checkpoint is
written, so that oom.action=retry and skip see it too) the noted state is put
back where it can be; the rest is named.  Not seen: gradients of tensors that no
optimizer or zeroed module holds, and a `p.grad.zero_()` of the program's own
(such a gradient counts as accumulated: named, not restored).

Imports nothing but sys at the top (plugins.import_patches()).
"""
import sys

from _portal.state.passthrough import drop_own_frame   # imports nothing but sys

try:   # imported with the package: the program's sys.modules no longer holds it later
    from _portal import _toplevel
except ImportError:  # pragma: no cover - the native module is always built
    _toplevel = None

_SERIAL = [0]            # one count: each zero_grad, each engine access
_LAST_BACKWARD = [0]     # the serial of the latest engine access
_HOLDER = [None]         # the holder the marks since the latest backward share
# id(optimizer or module) -> [weak reference to it, serial of its latest zero_grad, set_to_none]:
# a plain dict (a WeakKeyDictionary costs microseconds to walk); the reference's
# callback drops the entry.
_OWNERS = {}
_C = {}                  # C-speed helpers, set by the first patch (operator, itertools)
_UNKNOWN = "unknown"     # a scan that failed: what the gradients were is not known


# --- the marks ----------------------------------------------------------------------------

def holder():
    """For an iteration mark: the holder the next backward fills ([None] until then)."""
    h = _HOLDER[0]
    if h is None or h[0] is not None:
        h = _HOLDER[0] = [None]
    return h


def _backward():
    """Each access to the autograd engine: the first since the latest mark notes
    the parameters' gradients into that mark's holder."""
    h = _HOLDER[0]
    if h is not None and h[0] is None:
        try:
            h[0] = (_SERIAL[0], _scan(_LAST_BACKWARD[0]))
        except Exception:  # noqa: BLE001 - never the program's backward's failure
            h[0] = _UNKNOWN
    _SERIAL[0] += 1
    _LAST_BACKWARD[0] = _SERIAL[0]


def _scan(last_backward):
    """[(owner, its parameters, their grads, the grads' versions (-1: None),
    whether the owner zeroed them since the previous backward)]: lists made by C
    loops (map), a few microseconds for a small model.  What an owner zeroed needs
    no versions (its grads go back to zero, whatever the backward did to them),
    and after set_to_none no grads (all None)."""
    notes = []
    c = _C
    for ref, serial, to_none in list(_OWNERS.values()):
        owner = ref()
        if owner is None:
            continue
        zeroed = serial > last_backward
        if zeroed and to_none:   # all None: its parameters are listed at the rescue only
            notes.append((owner, None, None, None, True))
            continue
        params = _params_of(owner)
        grads = list(map(c["grad"], params))
        notes.append((owner, params, grads, None if zeroed else list(map(getattr, grads, c["version"], c["none"])),
                      zeroed))
    return notes


def _params_of(owner):
    groups = getattr(owner, "param_groups", None)
    if groups is not None:
        return list(_C["chain"](map(_C["params"], groups)))
    return list(owner.parameters())


# --- the patches --------------------------------------------------------------------------

def _entry(owner):
    key = id(owner)
    entry = _OWNERS.get(key)
    if entry is None or entry[0]() is not owner:
        import weakref   # imported by torch by now, never by Portal's start-up
        entry = _OWNERS[key] = [weakref.ref(owner, lambda ref, key=key: _forget(key, ref)), 0, False]
    return entry


def _forget(key, ref):
    entry = _OWNERS.get(key)
    if entry is not None and entry[0] is ref:
        del _OWNERS[key]


def register(optimizer):
    """An optimizer made, or rebuilt by a resume (torch/objects.py)."""
    try:
        _entry(optimizer)
    except TypeError:
        pass


def _zeroed(owner, to_none):
    _SERIAL[0] += 1
    entry = _OWNERS.get(id(owner))
    if entry is None or entry[0]() is not owner:
        try:
            entry = _entry(owner)
        except TypeError:
            return
    entry[1], entry[2] = _SERIAL[0], bool(to_none)


def _helpers():
    if not _C:   # torch imports both long before its optimizers
        import itertools
        import operator
        _C.update(grad=operator.attrgetter("grad"), params=operator.itemgetter("params"),
                  chain=itertools.chain.from_iterable, version=itertools.repeat("_version"),
                  none=itertools.repeat(-1), nones=itertools.repeat(None))


def _default_to_none(fn):
    import inspect
    try:
        return bool(inspect.signature(fn).parameters["set_to_none"].default)
    except (KeyError, TypeError, ValueError):
        return False


def _wrap_zero_grad(cls):
    old = cls.zero_grad
    default = _default_to_none(old)

    def zero_grad(self, *args, **kwargs):
        try:
            result = old(self, *args, **kwargs)
        except BaseException as exc:
            drop_own_frame(exc)   # no frame of Portal's in the program's traceback
            raise
        _zeroed(self, args[0] if args else kwargs.get("set_to_none", default))
        return result
    zero_grad.__name__, zero_grad.__qualname__ = old.__name__, old.__qualname__
    zero_grad.__doc__, zero_grad.__wrapped__ = old.__doc__, old
    cls.zero_grad = zero_grad


def _patch_optimizer(module):
    _helpers()
    cls = module.Optimizer
    if getattr(cls, "_portal_grads", False):
        return
    init = cls.__init__

    def __init__(self, *args, **kwargs):
        try:
            init(self, *args, **kwargs)
        except BaseException as exc:   # `optimizer got an empty parameter list`: python's traceback
            drop_own_frame(exc)
            raise
        register(self)
    __init__.__name__, __init__.__qualname__ = init.__name__, init.__qualname__
    __init__.__doc__, __init__.__wrapped__ = init.__doc__, init
    cls.__init__ = __init__
    _wrap_zero_grad(cls)
    cls._portal_grads = True


def _patch_module(module):
    _helpers()
    cls = module.Module
    if getattr(cls, "_portal_grads", False):
        return
    _wrap_zero_grad(cls)
    cls._portal_grads = True


def _patch_engine(module):
    """Variable._execution_engine becomes a property of its metaclass (a data
    descriptor there wins over the class's own attribute): each access counts."""
    meta = type(module.Variable)
    if getattr(meta, "_portal_grads", False) or meta is type:
        return
    engine = [module.Variable.__dict__.get("_execution_engine")]
    if engine[0] is None:
        return

    def get(cls):
        _backward()
        return engine[0]

    def put(cls, value):
        engine[0] = value
    fget = _toplevel.Untraced(get) if _toplevel is not None else get   # unseen by a tracer
    meta._execution_engine = property(fget, put)
    meta._portal_grads = True


def import_patches():
    return {"torch.optim.optimizer": _patch_optimizer,
            "torch.nn.modules.module": _patch_module,
            "torch.autograd.variable": _patch_engine}


# --- the verdict and the restore ----------------------------------------------------------

def _noted(code, loop_line):
    """The holder's notes for the current iteration of that loop: None where no
    backward ran in it (or the loop is not marked), _UNKNOWN, or the list."""
    iteration = sys.modules.get("_portal.fidelity.iteration")
    marks = iteration.marks_of(code, loop_line) if iteration is not None else None
    h = (marks or {}).get("grads")
    return h[0] if h else None


def _plan(noted, saved=None):
    """([(parameter, gradient to put back: None or the zeroed tensor)], how many
    parameters the backward changed that cannot be put back).  A parameter that
    an optimizer or module zeroed again later in the failed iteration (a second
    model's `zero_grad()` before its own backward) is left as it is: the rerun
    zeroes it again before it is used."""
    at, notes = noted
    seen = {}
    for owner, params, grads, versions, zeroed in notes:
        entry = _OWNERS.get(id(owner))
        later = entry is not None and entry[0]() is owner and entry[1] > at
        if params is None:
            params = _params_of(owner)
        for p, g, version in zip(params, grads or _C["nones"], versions or _C["none"]):
            prev = seen.get(id(p))
            seen[id(p)] = (p, g, version, zeroed or (prev is not None and prev[3]),
                           later or (prev is not None and prev[4]))
    restore, lost = [], 0
    for p, g, version, zeroed, later in seen.values():
        now = p.grad
        if g is None:
            if now is not None:
                restore.append((p, None))
        elif now is g and g._version == version:
            continue   # untouched by the backward (not reached yet, frozen ...)
        elif zeroed:
            restore.append((p, g))
        elif not later and (saved is None or id(p) in saved):
            lost += 1
    return restore, lost, seen


def will_differ(code, loop_line, saved=None):
    """[text]: what the failed iteration's backward did to gradients that the
    restore cannot undo, for the parameters the checkpoint holds (`saved`: ids,
    from decide.py's trial; None: all)."""
    notes = _noted(code, loop_line)
    if notes is None:
        return []
    if notes is _UNKNOWN:
        return ["the failed iteration ran backward(), and the gradients before it could not be noted: "
                "what it had already added to them will count twice"]
    _, lost, known = _plan(notes, saved)
    out = []
    if lost:
        what = "1 parameter" if lost == 1 else f"{lost} parameters"
        out.append(f"the failed iteration's backward() had already added to the gradients of {what}: "
                   f"that micro-batch will count twice")
    others = _unowned(known, saved)
    if others:
        what = "1 tensor" if others == 1 else f"{others} tensors"
        out.append(f"the failed iteration's backward() may have added to the gradients of {what} that no "
                   f"optimizer holds (Portal notes only an optimizer's parameters, or a module's that "
                   f"zero_grad() zeroes): that micro-batch may count twice")
    return out


def _unowned(known, saved):
    """How many leaf tensors of the checkpoint's state that require grad and hold
    a gradient are not among the noted parameters (a hand-written SGD over its
    own tensors): what they held before the backward is not known.  A walk of
    the collector's objects, on the rescue's path only; 0 where the state's
    objects are not known."""
    torch = sys.modules.get("torch")
    if torch is None or saved is None:
        return 0
    import gc
    tensor, count = torch.Tensor, 0
    for obj in gc.get_objects():
        # type(), not isinstance(): that asks each object its __class__, and some answer
        # with a warning on the program's stderr (torch.distributed.reduce_op)
        if id(obj) in saved and id(obj) not in known and issubclass(type(obj), tensor):
            try:
                if obj.requires_grad and obj.is_leaf and obj.grad is not None:
                    count += 1
            except Exception:  # noqa: BLE001 - a tensor subclass that refuses: not counted
                pass
    return count


def restore(code, loop_line):
    """Put back the gradients the failed iteration's backward changed where they
    were None or zero when it started (the point is chosen: suspend.py)."""
    notes = _noted(code, loop_line)
    if notes is None or notes is _UNKNOWN:
        return
    fix = _plan(notes)[0]
    if not fix:
        return
    torch = sys.modules["torch"]
    with torch.no_grad():
        for p, g in fix:
            if g is not None:
                g.zero_()
            p.grad = g
