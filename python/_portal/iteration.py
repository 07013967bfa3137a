"""The random number generators as they were when an iteration started.

A training loop's iteration draws random numbers before it can fail (dropout in
the forward pass, then out of memory in backward()).  The iteration runs again
after a resume, and must draw the same numbers again to give the same result; the
state saved at the failure has already moved past them.  So a loop whose body
calls `.backward(...)` (instrument.py) starts each iteration with
``__portal_iteration__(LOOP_LINE)``, which notes the generators' states (about 10
microseconds: little next to a training step), and the capture saves those in
place of the current ones when that loop is the resume point.  Other loops pay
nothing.

Noted: `random`, torch's CPU generator and, once the program has initialised
CUDA, torch's CUDA generators; numpy's global generator when the body mentions
`np.random` or `numpy.random`.  A generator object the
program made itself (`torch.Generator()`, `np.random.default_rng()`) is part of
the saved state and is not rolled back.
"""
import random
import sys

from _portal import irreversible   # what the marks note for it: what cannot be rolled back

NAME = "__portal_iteration__"

# (code object, loop line) -> the states at the start of its latest iteration.
_MARKS = {}


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
            "irreversible": irreversible.note()}


def iteration_start(loop_line, numpy_too=False):
    """The builtin the instrumented loop calls first in each iteration.  numpy's
    global generator costs 20 microseconds to note, the others 5 together: it is
    noted only for a body that mentions `np.random` or `numpy.random`."""
    _MARKS[(sys._getframe(1).f_code, loop_line)] = _states(numpy_too)


def at_start(code, loop_line):
    """The states noted when the current iteration of that loop started, or None."""
    return _MARKS.get((code, loop_line))


def roll_back(process, marks):
    """Put the iteration's starting states into the captured ProcessState."""
    process.random_state = marks["random"]
    if marks["numpy"] is not None:
        process.numpy_state = marks["numpy"]
    torch_state = (process.plugins or {}).get("torch_state")
    if torch_state is not None and marks["torch"] is not None:
        torch_state["rng"] = marks["torch"]
        if marks["cuda"] is not None:
            torch_state["cuda_rng"] = marks["cuda"]
