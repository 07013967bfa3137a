"""The random number generators as they were when an iteration started.

A training loop's iteration draws random numbers before it can fail (dropout in
the forward pass, then out of memory in backward()).  The iteration runs again
after a resume, and must draw the same numbers again to give the same result; the
state saved at the failure has already moved past them.  So a loop whose body
calls `.backward(...)`, itself or through functions of its module however deep
(instrument.py: a Trainer's fit -> _train_epoch -> _step), starts each iteration
with ``__portal_iteration__(LOOP_LINE)``, which notes the generators' states
(about 10 microseconds: little next to a training step), and the capture saves
those in place of the current ones when that loop is the resume point.  Other
loops pay nothing.

Noted: `random`, torch's CPU generator and, once the program has initialised
CUDA, torch's CUDA generators; numpy's global generator when the module mentions
`np.random` or `numpy.random`; how many batches each live DataLoader iterator
had given (dataloader.py keeps the set): an iterator the body advances itself
(`batch = next(it)`) is saved with its count at the iteration's start, so the
failed iteration's batch is delivered again; the count of each live tqdm bar
(tqdm_state.py), so that a `bar.update()` of the failed iteration is not counted
twice.  A generator object the program
made itself (`torch.Generator()`, `np.random.default_rng()`, `random.Random`)
and holds near the loop is noted too (generator_states.py) and saved with its
state at the iteration's start.
"""
import random
import sys

from _portal import ITERATION_NAME   # the builtin a marked iteration calls first

from _portal.fidelity import irreversible   # what the marks note for it: what cannot be rolled back
from _portal.fidelity import generator_states
from _portal.state import tqdm_state     # the counts of live tqdm bars
from _portal import _frames        # the variables a mark reads (_scalars)
from _portal.bytecode.slots import slot_names
from _portal.fidelity import grads          # the gradients before the iteration's first backward

NAME = ITERATION_NAME

# (code object, loop line) -> the states at the start of its latest iteration.
_MARKS = {}
_DATALOADER = "torch.utils.data.dataloader"


# --- random's state, cheaply ------------------------------------------------------------
# random.getstate() builds 625 ints (~6 microseconds, most of a mark); _rngstate copies
# the 2,500 bytes behind them instead, and the tuple is built only for the iteration
# a capture rolls back to.  The copy relies on the generator's C layout: checked once
# against getstate() on a seeded, drawn-from generator; getstate() if it disagrees.
_SNAPSHOT = []     # [snapshot function or None], decided at the first mark
try:
    # Imported now, with the package: after the start-up the program's sys.modules
    # no longer holds Portal's modules (boot.py), so a mark could not import it.
    from _portal import _rngstate
except ImportError:    # not built for this interpreter: getstate(), exact and slower
    _rngstate = None


def _snapshot_function():
    if _rngstate is None:
        return None
    try:
        probe = random.Random(20240601)
        probe.random()
        version, internal, gauss_next = probe.getstate()
        if _rngstate.internal_state(_rngstate.snapshot(probe)) != internal:
            return None
        return _rngstate.snapshot
    except Exception:   # another layout than rng_snapshot.c expects: the exact, slower way
        return None


def _random_mark():
    """What a mark notes of `random`: ("snapshot", bytes, gauss_next), getstate(),
    or None when the program has not imported it.  The program's own module, from
    its sys.modules: the one imported here at start-up is Portal's copy (boot.py
    forgets start-up's imports), with a generator of its own."""
    module = sys.modules.get("random")
    inst = getattr(module, "_inst", None)
    if inst is None:
        return None
    if not _SNAPSHOT:
        _SNAPSHOT.append(_snapshot_function())
    snapshot = _SNAPSHOT[0]
    if snapshot is None or type(inst).getstate is not module.Random.getstate:
        return inst.getstate()
    return ("snapshot", snapshot(inst), inst.gauss_next)


def random_state(noted):
    """The random.getstate() value of what _random_mark() noted (None: none)."""
    if noted is None or noted[0] != "snapshot":
        return noted
    return (random.Random.VERSION, _rngstate.internal_state(noted[1]), noted[2])


def _states(numpy_too):
    np = sys.modules.get("numpy") if numpy_too else None
    torch = sys.modules.get("torch")
    cuda = None
    if torch is not None and torch.cuda.is_initialized():
        cuda = [state.cpu() for state in torch.cuda.get_rng_state_all()]
    return {"random": _random_mark(),
            "numpy": np.random.get_state() if np is not None else None,
            "torch": torch.get_rng_state() if torch is not None else None,
            "cuda": cuda,
            "irreversible": irreversible.note(),
            "loaders": _loader_counts(),
            "bars": tqdm_state.note(),
            "grads": grads.holder()}


def _loader_counts():
    """[(weak reference to a live DataLoader iterator, batches it has given)]:
    weak, so that a mark never keeps an epoch's iterator (and its workers) alive."""
    module = sys.modules.get(_DATALOADER)
    live = getattr(getattr(module, "_BaseDataLoaderIter", None), "_portal_live", None)
    if not live:
        return ()
    return [(ref, ref()._num_yielded) for ref in [*live.data] if ref() is not None]


def iteration_start(loop_line, numpy_too=False, target_names=(), targets=(), rebound=()):
    """The builtin the instrumented loop calls first in each iteration.  numpy's
    global generator costs 20 microseconds to note, the others 5 together: it is
    noted only for a module that mentions `np.random` or `numpy.random`.
    target_names, targets: the for loop's target variables and their values;
    rebound: the other variables the body rebinds (_scalars)."""
    frame = sys._getframe(1)
    key = (frame.f_code, loop_line)
    marks = _states(numpy_too)
    marks["objects"] = generator_states.note(key, frame)
    marks["code"] = frame.f_code
    marks["targets"] = dict(zip(target_names, targets))
    if rebound:
        marks["targets"].update(_scalars(frame, rebound))
    marks["frame"] = id(frame)           # rng_check.py: which frame on the stack took it
    _MARKS[key] = marks


_SCALAR_TYPES = frozenset({int, float, complex, bool, str, bytes, type(None)})
_SLOTS = {}        # (code object, names) -> (((name, slot), ...), slots to read) of a mark
_UNBOUND = object()


def _scalars(frame, names):
    """{name: value} of the variables of a function's frame among `names` (those
    its loop's body rebinds: `epoch += 1` in a handler, `best = loss`, an RNN's
    `hidden = repackage(hidden)`) that hold a number (numpy's too), a string, None
    or a small tensor now (_kept), as the iteration starts: the rerun gets them
    back (reduce_frame_state) rather than the failed iteration's values.  Only
    these: a reference kept to another object (the last iteration's activations)
    would keep it alive for a whole iteration; a cell is a closure's, left as it is."""
    code = frame.f_code
    slots = _SLOTS.get((code, names))      # two loops of a function rebind different names
    if slots is None:
        if not code.co_flags & 0x1:        # CO_OPTIMIZED: a module's loop binds globals
            slots = ()
        else:
            table = slot_names(code)
            cells = set(code.co_cellvars) | set(code.co_freevars)
            slots = tuple((name, table.index(name)) for name in names
                          if name in table and name not in cells)
        slots = (slots, max((i for _, i in slots), default=-1) + 1)
        _SLOTS[(code, names)] = slots
    slots, top = slots
    if not top:
        return {}
    values = _frames.frame_slots(frame, 0, top, _UNBOUND)
    return {name: values[i] for name, i in slots if _kept(values[i])}


# A tensor a mark keeps: its data at most this size (an RNN's hidden state is a few
# KiB to a MiB); a tuple of at most _TUPLE_MAX of them (an LSTM's (h, c)).
_TENSOR_MAX = 1 << 20
_TUPLE_MAX = 8


def _kept(value):
    """A number, a string, bytes or None; a numpy number or bool (`total +=
    x.sum()` makes a numpy.float64): immutable and small, like the others (not
    numpy.void, which may be a view of a structured array's row).  Or a small
    torch.Tensor, or a tuple of a few: kept alive one iteration longer, it costs
    at most its size; a change the failed iteration made to it in place is named
    (stores_changed.py), as for any tensor of the state."""
    kind = type(value)
    if kind in _SCALAR_TYPES:
        return True
    torch = sys.modules.get("torch")
    if torch is not None:
        if kind is tuple and 0 < len(value) <= _TUPLE_MAX:
            return all(type(v) is torch.Tensor and _small(v) for v in value)
        if kind is torch.Tensor:
            return _small(value)
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, (np.number, np.bool_))


def _small(tensor):
    try:
        return tensor.element_size() * tensor.nelement() <= _TENSOR_MAX
    except Exception:  # noqa: BLE001 - a tensor that cannot say (a meta tensor ...): not kept
        return False



def marks_on_stack(frame, code, loop_line):
    """[marks] taken by loops of `frame` (other than `code`'s loop at loop_line)
    and of the frames that called it, while those frames ran: each was taken
    before the current iteration of the loop at `loop_line` started (a caller's
    before it made its call; one of `frame`'s by a loop that ran before that one,
    or around it)."""
    frames = {}
    while frame is not None:
        frames.setdefault((frame.f_code, id(frame)), True)
        frame = frame.f_back
    return [marks for (c, line), marks in list(_MARKS.items())
            if (c, marks.get("frame")) in frames and not (c is code and line == loop_line)]


def at_start(code, loop_line):
    """The states noted when the current iteration of that loop started, or None.
    Asked once per loop the capture tries (the marks then go to the picklings in
    their PickleContext, checkpoint/context.py)."""
    return marks_of(code, loop_line)


def marks_of(code, loop_line):
    """The states noted when the current iteration of that loop started, or None;
    a look only (at_start is the capture's, which also forgets the roll-back)."""
    return _MARKS.get((code, loop_line))


# batches_at_start() of an iterator made since the iteration started.
MADE_SINCE = -1


def batches_at_start(marks, iterator):
    """How many batches the DataLoader iterator had given when the iteration being
    rolled back to (its `marks`) started; MADE_SINCE for one made since; None when
    nothing is rolled back (marks None: the loop is not marked)."""
    if marks is None:
        return None
    for ref, count in marks.get("loaders", ()):
        if ref() is iterator:
            return count
    return MADE_SINCE


def roll_back(process, marks):
    """Put the iteration's starting states into the captured ProcessState; the
    DataLoader iterators are wound back as they are saved (batches_at_start, with
    the marks the pickling's context carries)."""
    if marks["random"] is not None:
        process.random_state = random_state(marks["random"])
    if marks["numpy"] is not None:
        process.numpy_state = marks["numpy"]
    torch_state = (process.plugins or {}).get("torch_state")
    if torch_state is not None and marks["torch"] is not None:
        torch_state["rng"] = marks["torch"]
        if marks["cuda"] is not None:
            torch_state["cuda_rng"] = marks["cuda"]


# --- the loop's own frame ------------------------------------------------------------------

def reduce_frame_state(fs, marks):
    """The resume loop's saved frame with its for loop's targets as the failed
    iteration started: `x = augment(x)` in the body rebinds x, and the iteration
    runs again on the batch it was given, not on its own result.  A target that is
    dead at the resume point (not saved) stays so; a cell (a closure's) is left as it
    is, and so is a loop at module level (its targets are globals)."""
    if marks is None or fs.call is not None or fs.function is None \
            or getattr(fs.function, "__code__", None) is not marks.get("code") \
            or not marks.get("targets"):
        return NotImplemented
    from _portal.checkpoint.program import EMPTY
    code = fs.function.__code__
    cls, args, state = fs.__reduce_ex__(5)[:3]
    saved = list(state["locals"])
    for name, value in marks["targets"].items():
        if name in code.co_varnames and name not in code.co_cellvars:
            slot = code.co_varnames.index(name)
            if slot < len(saved) and saved[slot] is not EMPTY:
                saved[slot] = value
    state = dict(state, locals=saved)
    return cls, args, state


def reducers(context):
    from _portal.checkpoint.program import FrameState
    return {FrameState: lambda fs: reduce_frame_state(fs, context.marks)}
