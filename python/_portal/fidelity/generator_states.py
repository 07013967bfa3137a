"""The generator objects a training loop's program holds, rolled back with the
global ones (iteration.py; a plug-in: plugins.MODULES, for its reducers).

A marked iteration (iteration.py) may draw from generators the program made
itself: `rng = np.random.default_rng(0)` for augmentation, a `random.Random`, a
`torch.Generator` given to `torch.randn(..., generator=g)`, a dataset's own
`self.rng`.  Which ones the checkpoint will hold is known only when it is written,
so the first mark of a loop in a frame looks for them near the loop: the frame's
locals and its module's globals, and what they hold (instance attributes, list,
tuple and dict items) down to MAX_DEPTH objects away, at most MAX_VISITS objects in
all.  Each mark then notes their states (a few microseconds each); the search is
made again when the loop runs in a new frame (another call of the function) and
every RESCAN_EVERY marks.  When that loop is the resume point, the checkpoint saves
each of them with the state it had when the failed iteration started
(reduce_rolled_back); the program's objects themselves are not changed (if the
capture declines, the program goes on as it was).

An `itertools.cycle` found there has its position noted as well (dataloader.py
saves it so: past its first pass, the items it gives are its own).

Not found, so not rolled back: a generator only reachable further away or through
another module's globals, or made after the search in the same frame.  The global
generators (`random`'s, numpy's, torch's defaults) are noted by iteration.py.
"""
import sys

from _portal.bytecode import frame_locals
from _portal.state import itertools_state   # read at the marks, in the program (no import then)

MAX_DEPTH = 4        # locals (0) -> self (1) -> self.loader (2) -> .dataset (3) -> .rng
MAX_VISITS = 4000
MAX_ITEMS = 64       # items of one list, tuple or dict looked at
RESCAN_EVERY = 256

# (code, loop line) -> [id of the frame searched, marks since, [generator objects]]
_FOUND = {}


def _types():
    """(generator types, their global instances noted elsewhere, types not looked into)."""
    kinds, globals_, opaque = [], [], [type(sys), type, str, bytes, int, float, complex, bool]
    rnd = sys.modules.get("random")
    if rnd is not None:
        kinds.append(rnd.Random)
        globals_.append(getattr(rnd, "_inst", None))
    np = sys.modules.get("numpy")
    if np is not None:
        kinds += [np.random.Generator, np.random.RandomState, np.random.BitGenerator]
        globals_.append(getattr(np.random.mtrand, "_rand", None))
        opaque.append(np.ndarray)
    torch = sys.modules.get("torch")
    if torch is not None:
        kinds.append(torch._C.Generator)
        globals_.append(torch.default_generator)
        opaque.append(torch.Tensor)
    itertools = sys.modules.get("itertools")
    # its position past the first pass is its own (dataloader.py); read through
    # itertools_state.py (its own __reduce__ up to 3.13, Portal's reader from 3.14)
    if itertools is not None:
        if itertools_state.saveable_cycle():
            kinds.append(itertools.cycle)
    return tuple(kinds), {id(g) for g in globals_ if g is not None}, tuple(opaque)


# What the search does with an object, decided once per type and search
# (_verdict): a generator to note, something not looked into, or where its
# children are.  Not kept past the search: it would keep the program's classes alive.
_GENERATOR, _OPAQUE, _MAPPING, _SEQUENCE, _ATTRIBUTES = range(5)


def _verdict(cls, kinds, opaque):
    """By the object's own type, not isinstance(): torch's Generator has a
    metaclass whose __instancecheck__ is Python code, and a search visits
    hundreds of objects; an object that only claims a class (__class__) is not
    a generator Portal could save anyway."""
    if issubclass(cls, kinds):
        return _GENERATOR
    if issubclass(cls, opaque):
        return _OPAQUE
    if issubclass(cls, dict):
        return _MAPPING
    if issubclass(cls, (list, tuple)):
        return _SEQUENCE
    return _ATTRIBUTES


def _children(obj, verdict):
    if verdict == _MAPPING:
        return list(obj.values())[:MAX_ITEMS]
    if verdict == _SEQUENCE:
        return list(obj[:MAX_ITEMS])
    try:
        attributes = object.__getattribute__(obj, "__dict__")
    except (AttributeError, TypeError):
        return ()
    return list(attributes.values())[:MAX_ITEMS] if isinstance(attributes, dict) else ()


def _bit_generator(obj):
    """The bit generator a numpy Generator or RandomState draws from, or None.
    numpy 2 pickles it apart (its state in its own reduce, the Generator's None),
    so that it is what is rolled back; numpy 1 pickles its state inside theirs."""
    np = sys.modules.get("numpy")
    if np is None:
        return None
    if isinstance(obj, np.random.Generator):
        return obj.bit_generator
    if isinstance(obj, np.random.RandomState):
        return getattr(obj, "_bit_generator", None)
    return None


def find(frame):
    """The generator objects near the loop's frame (see the module's docstring)."""
    kinds, noted_globally, opaque = _types()
    if not kinds:
        return []
    import types
    opaque += (types.FunctionType, types.BuiltinFunctionType, types.MethodType,
               types.CodeType, types.FrameType)
    verdicts = {}
    # The frame's variables, read in place: nothing of the program's is changed
    # (a `d = locals()` it holds stays as it was) and nothing kept (frame_locals.py).
    roots = [(value, 0) for value in frame_locals.snapshot(frame).values()]
    if not frame_locals.namespace_is_globals(frame):
        roots += [(value, 1) for value in frame.f_globals.values()]
    found, seen, visits = [], set(), 0
    todo = roots[::-1]
    while todo and visits < MAX_VISITS:
        obj, depth = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        visits += 1
        cls = type(obj)
        verdict = verdicts.get(cls)
        if verdict is None:
            verdict = verdicts[cls] = _verdict(cls, kinds, opaque)
        if verdict == _GENERATOR:
            if id(obj) not in noted_globally:
                found.append(obj)
                inner = _bit_generator(obj)
                if inner is not None and id(inner) not in seen:
                    seen.add(id(inner))
                    found.append(inner)
            continue
        if depth >= MAX_DEPTH or verdict == _OPAQUE:
            continue
        children = _children(obj, verdict)
        if children:
            depth += 1
            todo.extend([(child, depth) for child in reversed(children)])
    return found


def state_of(obj):
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch._C.Generator):
        return obj.get_state()
    itertools = sys.modules.get("itertools")
    if itertools is not None and type(obj) is itertools.cycle:
        it, kept, passed = itertools_state.cycle_parts(obj)
        # past its first pass: the index of its next item in what it kept
        return ("again", it.__reduce__()[2]) if passed else ("first", len(kept))
    return obj.__reduce__()[2]   # random.Random, numpy's Generator and RandomState: pickle's own


def note(key, frame):
    """[(generator, state)] for the loop `key` whose iteration starts in `frame`."""
    entry = _FOUND.get(key)
    if entry is None or entry[0] != id(frame) or entry[1] >= RESCAN_EVERY:
        entry = _FOUND[key] = [id(frame), 0, find(frame)]
    entry[1] += 1
    return [(obj, state_of(obj)) for obj in entry[2]]


# --- saving ------------------------------------------------------------------------------

def state_at_start(marks, obj):
    """What was noted of `obj` when the iteration rolled back to (its `marks`, or
    None) started, or None."""
    for held, state in (marks or {}).get("objects", ()):
        if held is obj:
            return state
    return None


def reduce_rolled_back(obj, marks):
    """A generator object as pickle saves it, with the state it had when the failed
    iteration started (when it was noted then); NotImplemented: as usual."""
    state = state_at_start(marks, obj)
    if state is None:
        return NotImplemented
    reduced = obj.__reduce__()
    return (reduced[0], reduced[1], state) + tuple(reduced[3:])


def reduce_torch_generator(g, marks):
    from _portal.torch import objects as torch_state
    function, args = torch_state.reduce_generator(g)
    state = state_at_start(marks, g)
    return (function, args) if state is None else (function, args[:-1] + (state,))


def reducers(context):
    rolled_back = lambda obj: reduce_rolled_back(obj, context.marks)  # noqa: E731
    exact = {}
    np = sys.modules.get("numpy")
    if np is not None:
        exact[np.random.Generator] = exact[np.random.RandomState] = rolled_back
    if sys.modules.get("torch") is not None:
        exact[sys.modules["torch"]._C.Generator] = lambda g: reduce_torch_generator(g, context.marks)
    return exact


def subclass_reducers(context):
    rolled_back = lambda obj: reduce_rolled_back(obj, context.marks)  # noqa: E731
    inherited = {}
    rnd = sys.modules.get("random")
    if rnd is not None:
        inherited[rnd.Random] = rolled_back
    np = sys.modules.get("numpy")
    if np is not None:      # PCG64, MT19937, Philox, SFC64, ...: their pickle state
        inherited[np.random.BitGenerator] = rolled_back
    return inherited
