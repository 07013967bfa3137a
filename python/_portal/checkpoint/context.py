"""What one pickling of the program's state is for, handed by the stage that
pickles (rescue/decide.py's trial, rescue/suspend.py's write) to every plug-in's
reducers (state/plugins.reducers): the stage's state is passed in, never read
from another stage's module globals.  A reducer that needs none of it ignores it.
"""
from dataclasses import dataclass
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
