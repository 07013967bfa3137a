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
failed iteration's batch is delivered again.  A generator object the program
made itself (`torch.Generator()`, `np.random.default_rng()`) is part of the
saved state and is not rolled back.
"""
import random
import sys

NAME = "__portal_iteration__"

# (code object, loop line) -> the states at the start of its latest iteration.
_MARKS = {}
# The marks of the loop being captured (roll_back), consulted by dataloader.py.
_ROLLING_BACK = None
_DATALOADER = "torch.utils.data.dataloader"


def _states(numpy_too):
    np = sys.modules.get("numpy") if numpy_too else None
    torch = sys.modules.get("torch")
    cuda = None
    if torch is not None and torch.cuda.is_initialized():
        cuda = [state.cpu() for state in torch.cuda.get_rng_state_all()]
    return {"random": random.getstate(),
            "numpy": np.random.get_state() if np is not None else None,
            "torch": torch.get_rng_state() if torch is not None else None,
            "cuda": cuda,
            "loaders": _loader_counts()}


def _loader_counts():
    """[(weak reference to a live DataLoader iterator, batches it has given)]:
    weak, so that a mark never keeps an epoch's iterator (and its workers) alive."""
    module = sys.modules.get(_DATALOADER)
    live = getattr(getattr(module, "_BaseDataLoaderIter", None), "_portal_live", None)
    if not live:
        return ()
    return [(ref, ref()._num_yielded) for ref in [*live.data] if ref() is not None]


def iteration_start(loop_line, numpy_too=False):
    """The builtin the instrumented loop calls first in each iteration.  numpy's
    global generator costs 20 microseconds to note, the others 5 together: it is
    noted only for a body that mentions `np.random` or `numpy.random`."""
    _MARKS[(sys._getframe(1).f_code, loop_line)] = _states(numpy_too)


def at_start(code, loop_line):
    """The states noted when the current iteration of that loop started, or None.
    Asked once per loop the capture tries: forgets the last loop's roll-back."""
    global _ROLLING_BACK
    _ROLLING_BACK = None
    return _MARKS.get((code, loop_line))


# batches_at_start() of an iterator made since the iteration started.
MADE_SINCE = -1


def batches_at_start(iterator):
    """How many batches the DataLoader iterator had given when the iteration being
    rolled back started; MADE_SINCE for one made since; None when no roll-back is
    under way (the loop is not marked)."""
    if _ROLLING_BACK is None:
        return None
    for ref, count in _ROLLING_BACK.get("loaders", ()):
        if ref() is iterator:
            return count
    return MADE_SINCE


def roll_back(process, marks):
    """Put the iteration's starting states into the captured ProcessState; the
    DataLoader iterators are wound back as they are saved (batches_at_start)."""
    global _ROLLING_BACK
    _ROLLING_BACK = marks
    process.random_state = marks["random"]
    if marks["numpy"] is not None:
        process.numpy_state = marks["numpy"]
    torch_state = (process.plugins or {}).get("torch_state")
    if torch_state is not None and marks["torch"] is not None:
        torch_state["rng"] = marks["torch"]
        if marks["cuda"] is not None:
            torch_state["cuda_rng"] = marks["cuda"]
