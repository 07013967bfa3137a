"""The saved program: what a checkpoint's pickle holds.

    ProgramState
      frames   [FrameState]  the chain from __main__'s module frame (first) to the
                             frame of the loop it continues from (last)
      main     dict          __main__'s globals (rebuilt by value)
      process  ProcessState  argv, working directory, environment, sys.path, RNGs
      fake_oom [int] | None  PORTAL_FAKE_OOM's hit counts

Objects shared anywhere in it are pickled once, so they stay shared.  The user's
own modules are not listed here: the pickler saves them by value with __main__
(reducers.user_modules()).
"""
from dataclasses import dataclass, field
from typing import Any, List, Optional


class _Empty:
    """An empty fast-local or stack slot (C NULL), or a local not saved because it
    is dead at the resume point."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __reduce__(self):
        return "EMPTY"

    def __repr__(self):
        return "EMPTY"


EMPTY = _Empty()


@dataclass
class CallInfo:
    """How a caller frame enters the next frame of the chain when it resumes.

    kind: 'call' (PRECALL/CALL, or KW_NAMES before them), 'call_ex'
    (CALL_FUNCTION_EX) or 'for_iter' (the next frame is a generator that the
    caller's for loop is driving)."""
    kind: str
    nargs: int = 0
    has_kwargs: bool = False
    # What the call returns instead of the callee's value: the instance that
    # Cls(...) builds when the callee is its __init__; EMPTY otherwise.
    result: Any = EMPTY


@dataclass
class FrameState:
    function: Any                 # the frame's function; None for __main__'s module frame
    offset: int                   # the instruction it continues at (bytes)
    locals: List[Any]             # fast locals in co_varnames+cellvars+freevars order
    stack: List[Any]              # value-stack items below the resume point's operands
    call: Optional[CallInfo]      # None for the last frame (the loop's)
    filename: str = ""
    line: int = 0
    name: str = ""
    # The loop's frame only: the exception being handled where the body starts
    # (sys.exception() there: the loop is in an `except` block), else None.
    handled: Any = None

    def where(self):
        return f"{self.filename}:{self.line} in {self.name}"


@dataclass
class ProcessState:
    argv: List[str]
    orig_argv: List[str]
    cwd: str
    environ: dict
    path: List[str]
    random_state: Any = None
    numpy_state: Any = None
    plugins: Any = None         # {plug-in module: its state}, see plugins.py
    recursion_limit: Optional[int] = None  # the program's sys.getrecursionlimit()


@dataclass
class LoopInfo:
    filename: str
    line: int
    iteration: Optional[int]      # 0-based index of the iteration that runs again, if known
    function: str = "<module>"
    iteration_text: Optional[str] = None   # "batch 4 (0-based) of epoch 2 (0-based)" ...


@dataclass
class ProgramState:
    frames: List[FrameState]
    main: dict
    process: ProcessState
    loop: LoopInfo
    fake_oom: Optional[List[int]] = None
    notes: List[str] = field(default_factory=list)
