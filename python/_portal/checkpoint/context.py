"""What one pickling of the program's state is for, handed by the stage that
pickles (rescue/decide.py's trial, rescue/suspend.py's write) to every plug-in's
reducers (state/plugins.reducers): the stage's state is passed in, never read
from another stage's module globals.  A reducer that needs none of it ignores it.
"""
from dataclasses import dataclass, field
from typing import Optional

__all__ = ["PickleContext"]


@dataclass(frozen=True)
class PickleContext:
    # decide.py's trial pickling into nothing: a reducer copies nothing off a device.
    trial: bool = False
    # The marks of the failed iteration's start (fidelity/iteration.py) that the
    # saved state is rolled back to; None where nothing is rolled back (a
    # preemption's point, a loop with no marks).
    marks: Optional[dict] = None
    # Filled by the pickling: the tensors saved as leaves, their autograd graph
    # already used by backward() (torch/objects.py), which the report names.
    cut: list = field(default_factory=list)
    # Where a device's tensors are copied to before they are written (torch/objects.py:
    # the job's directory; None: PORTAL_SPILL_DIR or the temporary directory).
    spill_dir: Optional[str] = None
    # What a plug-in keeps for the length of this one pickling, under its module's
    # name (torch/objects.py: one wrapper per storage, the capturing thread's mode).
    scratch: dict = field(default_factory=dict)
