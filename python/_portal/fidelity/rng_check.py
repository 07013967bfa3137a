"""Random generators the resume cannot roll back, named (decide.py's will-differ list).

A loop whose iterations are marked (iteration.py: its body calls `.backward()` or
draws, rng_names.py) is saved with the generators as they were when its failed
iteration started.  Another loop's iteration may still have drawn: through a
library's function the name table cannot see, or from a generator Portal never
found near the loop.  At the rescue each generator the checkpoint carries is
compared with the states Portal noted of it *before* the failed iteration
started: the marks of loops of the frames on the stack (iteration.marks_on_stack),
the note a DataLoader iterator of a for loop around the error took once its
epoch's sampling had drawn (dataloader.py), and the note taken when the library
was imported (or the program seeded it, or a resume restored it).  Still equal to
one of them: nothing was drawn since, so nothing in the failed iteration either,
and nothing is said.  Changed, or never noted: one line names
them, and `--policy oom.exact=true` declines the point (decide.py).

The generators: `random`'s, numpy's global one, torch's CPU and CUDA default
generators, and the generator objects held near the loop (generator_states.find:
`random.Random`, numpy's Generator and RandomState, `torch.Generator`).

Imports nothing but sys at the top (plugins.import_patches()).
"""
import sys

from _portal.state.passthrough import drop_own_frame   # imports nothing but sys

# name -> the state noted when the program imported, seeded or restored it.
_NOTED = {}

_LABELS = (("random", "random's generator"), ("numpy", "numpy's global generator"),
           ("torch", "torch's default generator"), ("cuda", "torch's CUDA generators"))


def _current(name):
    """The generator's state now, or None when the program never imported it."""
    if name == "random":      # the program's (Portal's start-up has a copy of its own)
        random = sys.modules.get("random")
        return random.getstate() if random is not None and hasattr(random, "getstate") else None
    if name == "numpy":
        np = sys.modules.get("numpy")
        return np.random.get_state() if np is not None and hasattr(np, "random") else None
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "get_rng_state"):
        return None
    if name == "torch":
        return torch.get_rng_state()
    if torch.cuda.is_initialized():
        return [state.cpu() for state in torch.cuda.get_rng_state_all()]
    return None


def note(*names):
    """Note the named global generators' states now (all when none is named)."""
    for name in names or [n for n, _ in _LABELS]:
        try:
            state = _current(name)
        except Exception:   # a half-imported library: noted at the next chance
            state = None
        if state is not None:
            _NOTED[name] = state


def _seeding(module, name, names):
    """module.name (a library's seed function) replaced by one that calls it, then
    notes the generators `names`.  Named as the module's attribute, so that pickle
    finds the wrapper again by reference (`random.seed` is a bound method, whose
    own qualified name is Random.seed)."""
    function = getattr(module, name, None)
    if function is None or hasattr(function, "__wrapped__"):
        return

    def seeded(*args, **kwargs):
        try:
            result = function(*args, **kwargs)
        except BaseException as exc:
            drop_own_frame(exc)   # no frame of Portal's in the program's traceback
            raise
        note(*names)
        return result
    seeded.__module__, seeded.__name__, seeded.__qualname__ = module.__name__, name, name
    seeded.__doc__ = getattr(function, "__doc__", None)
    seeded.__wrapped__ = function
    setattr(module, name, seeded)


def _patch_numpy(module):
    # numpy.random has run; `numpy.random` is not yet an attribute of numpy (its
    # __init__ is still running): noted from the module itself
    try:
        _NOTED["numpy"] = module.get_state()
    except Exception:
        pass
    for name in ("seed", "set_state"):
        _seeding(module, name, ("numpy",))


def _patch_torch_random(module):
    # torch/random.py: torch/__init__.py takes manual_seed, seed and set_rng_state
    # from it after it is executed, so the patched functions are those it exports.
    for name in ("manual_seed", "seed", "set_rng_state"):
        _seeding(module, name, ("torch", "cuda"))


def _patch_torch(module):
    note("torch")


def _patch_random(module):
    for name in ("seed", "setstate"):
        _seeding(module, name, ("random",))


def _patch_random_module(module):
    _patch_random(module)
    note("random")


def import_patches():
    return {"random": _patch_random_module, "numpy.random": _patch_numpy,
            "torch.random": _patch_torch_random, "torch": _patch_torch}


# --- the verdict --------------------------------------------------------------------------

def _same(a, b):
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(a, np.ndarray):
        return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b))
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor):
        return a.shape == b.shape and bool(torch.equal(a, b))
    return a == b


def _type_name(obj):
    cls = type(obj)
    np = sys.modules.get("numpy")
    torch = sys.modules.get("torch")
    if np is not None and cls in (np.random.Generator, np.random.RandomState):
        return f"numpy.random.{cls.__name__}"
    if torch is not None and cls is torch._C.Generator:
        return "torch.Generator"
    return f"{cls.__module__}.{cls.__qualname__}"


def _objects(loop_frame, saved):
    """The generator objects near the loop that the checkpoint holds (not a
    numpy Generator's bit generator: the Generator names it; not a cycle)."""
    from _portal.fidelity import generator_states
    np = sys.modules.get("numpy")
    itertools = sys.modules.get("itertools")
    out = []
    for obj in generator_states.find(loop_frame):
        if np is not None and isinstance(obj, np.random.BitGenerator):
            continue
        if itertools is not None and type(obj) is itertools.cycle:
            continue
        if saved is None or id(obj) in saved:
            out.append(obj)
    return out


def _as_seeded(obj):
    """Whether a generator object never noted is still as its seed made it (then
    nothing was drawn from it at all): a numpy Generator or RandomState made from
    a SeedSequence (`default_rng(3)`) and a CPU torch.Generator are compared with a
    new one made from the same seed; others cannot tell."""
    np = sys.modules.get("numpy")
    if np is not None and isinstance(obj, (np.random.Generator, np.random.RandomState)):
        bits = obj.bit_generator if isinstance(obj, np.random.Generator) else obj._bit_generator
        seed = getattr(bits, "seed_seq", None) or getattr(bits, "_seed_seq", None)
        if seed is None:
            return False
        return _same(type(bits)(seed).state, bits.state)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch._C.Generator) and obj.device.type == "cpu":
        fresh = torch.Generator()
        fresh.manual_seed(obj.initial_seed())
        return _same(fresh.get_state(), obj.get_state())
    return False


def will_differ(loop_frame, loop_line, roots, saved=None):
    """[text]: one line naming the generators the checkpoint carries that are not
    as the failed iteration started and not rolled back (see the docstring), or []."""
    try:
        moved = _moved(loop_frame, loop_line, roots, saved)
    except Exception as error:   # never a traceback of Portal's own: the cautious verdict
        return [f"random draws of the failed iteration may not be rolled back (Portal could not "
                f"compare the generators' states: {type(error).__name__})"]
    if not moved:
        return []
    return [f"random draws of the failed iteration are not rolled back: {', '.join(moved)} "
            f"(Portal did not note {'their states' if len(moved) > 1 else 'its state'} when that "
            f"iteration started, and cannot tell that nothing was drawn since)"]


def _loader_notes(roots):
    """The states noted when a DataLoader iterator on a saved frame's stack (the
    iterator of a for loop around the error: `for b in loader`, `enumerate(loader)`)
    had given the first batch of its epoch (dataloader.py): its sampling had drawn,
    and that was before the current iteration of each loop over it started."""
    notes = []
    for key, value in roots.items():
        if not key.startswith("stack item "):
            continue
        if type(value) is enumerate:
            value = value.__reduce__()[1][0]
        if not getattr(type(value), "_portal_patched", False):
            continue
        snap = getattr(value, "_portal_rng_after", None)
        if snap is not None:
            default, explicit, random_state, numpy_state = snap
            notes.append({"torch": default, "objects": explicit, "random": random_state,
                          "numpy": numpy_state})
    return notes


def _moved(loop_frame, loop_line, roots, saved):
    """Each generator not rolled back whose state is none that Portal noted before
    the failed iteration started: those states, one any of them still equals,
    say that nothing was drawn since (a state does not come back)."""
    from _portal.fidelity import iteration, generator_states, irreversible
    code = loop_frame.f_code
    own = iteration.marks_of(code, loop_line)        # rolled back: exact
    earlier = iteration.marks_on_stack(loop_frame, code, loop_line) + _loader_notes(roots)
    moved = []
    for name, label in _LABELS:
        if own is not None and own.get(name) is not None:
            continue
        current = _current(name)
        if current is None:
            continue
        befores = [iteration.random_state(m[name]) if name == "random" else m[name]
                   for m in earlier if m.get(name) is not None]
        if _NOTED.get(name) is not None:
            befores.append(_NOTED[name])
        if not any(_same(current, before) for before in befores):
            moved.append(label)
    rolled = {id(obj) for obj, _ in (own or {}).get("objects", ())}
    for obj in _objects(loop_frame, saved):
        if id(obj) in rolled:
            continue
        befores = [state for m in earlier for held, state in m.get("objects", ()) if held is obj]
        if not befores and _as_seeded(obj):
            continue
        current = generator_states.state_of(obj)
        if not any(_same(current, before) for before in befores):
            moved.append(f"{irreversible._name(obj, roots)} ({_type_name(obj)})")
    return moved
