"""Saving generators (plugged into the pickler by the capture).

A generator is rebuilt by calling its function with placeholder arguments (which
runs only its cell set-up, up to RETURN_GENERATOR) and writing its saved frame
into the new one (_frames.gen_inject):

    created    not started yet: its locals (the arguments) are written; it stays
               created, so its first send() must still be None
    suspended  stopped at a yield: locals, value stack and instruction pointer are
               written and it is marked suspended; send(v) resumes at the yield
    running    it is in the chain being captured (a loop in its body, driven by a
               for loop of its caller): rebuilt fresh; the restore's frame hook
               fills its frame when the caller's FOR_ITER first resumes it
    finished   rebuilt and closed
Coroutines and async generators are not saved.
"""
import sys
import types

from _portal import _frames
from _portal.bytecode.decode import info as _code_info
from _portal.checkpoint.program import EMPTY

# The generator frame states, as the native layer names them for the running
# CPython (3.11: created -2, suspended -1, executing 0; 3.13: created -3, suspended
# -2 at a yield and -1 in a yield from / await, executing 0).  A native module that
# does not name them is 3.11's, whose numbers these are.
_STATES_311 = {"FRAME_CREATED": -2, "FRAME_SUSPENDED_STATES": frozenset({-1}),
               "FRAME_EXECUTING": 0}
if not hasattr(_frames, "FRAME_CREATED") and sys.version_info[:2] != (3, 11):
    raise ImportError("portal: generators: the native _frames module names no frame states "
                      "for this python")
CREATED = getattr(_frames, "FRAME_CREATED", _STATES_311["FRAME_CREATED"])
SUSPENDED_STATES = getattr(_frames, "FRAME_SUSPENDED_STATES",
                           _STATES_311["FRAME_SUSPENDED_STATES"])
RUNNING = getattr(_frames, "FRAME_EXECUTING", _STATES_311["FRAME_EXECUTING"])
# A created generator continues at the instruction after its RETURN_GENERATOR's
# first unit (as it always has: one code unit on).
_CODE_UNIT = 2


def placeholders(code):
    """Arguments that satisfy any signature of `code`; the frame's saved locals
    replace them before its first instruction runs."""
    args = (None,) * code.co_argcount
    kwonly = code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount]
    return args, {name: None for name in kwonly}


def _new(function):
    args, kwargs = placeholders(function.__code__)
    return function(*args, **kwargs)


def _rb_generator(function, locals_, stack, offset, suspended):
    gen = _new(function)
    _frames.gen_inject(gen, locals_, stack, offset, EMPTY, suspended)
    return gen


def _rb_fresh_generator(function):
    return _new(function)


def _rb_finished_generator(function):
    gen = _new(function)
    gen.close()
    return gen


def _rb_finished_of_code(code, name, qualname):
    """A finished generator of `code`, for one whose frame no longer names its
    function (3.14 clears it when the generator finishes): a function of that code
    (empty globals, empty cells: nothing of it runs but the cell set-up before
    RETURN_GENERATOR) makes it, closed at once; its names are the saved one's."""
    cells = tuple(types.CellType() for _ in code.co_freevars)
    function = types.FunctionType(code, {}, name, None, cells or None)
    gen = _new(function)
    gen.close()
    gen.__name__, gen.__qualname__ = name, qualname
    return gen


def _finished(state):
    return state != CREATED and state != RUNNING and state not in SUSPENDED_STATES


def reduce_generator(gen):
    state, lasti, nlocalsplus, stacktop, function = _frames.gen_info(gen)
    if not isinstance(function, types.FunctionType):
        if _finished(state):
            return _rb_finished_of_code, (gen.gi_code, gen.__name__, gen.__qualname__)
        raise TypeError(f"cannot save generator {gen.__qualname__}: its function is unknown")
    if state == RUNNING:
        return _rb_fresh_generator, (function,)
    if state == CREATED:
        locals_ = _frames.gen_slots(gen, 0, nlocalsplus, EMPTY)
        return _rb_generator, (function, locals_, [], lasti + _CODE_UNIT, False)
    if state in SUSPENDED_STATES:
        locals_ = _frames.gen_slots(gen, 0, nlocalsplus, EMPTY)
        stack = _frames.gen_slots(gen, nlocalsplus, stacktop, EMPTY)
        return _rb_generator, (function, locals_, stack, _after(function.__code__, lasti), True)
    return _rb_finished_generator, (function,)


def _after(code, lasti):
    """Where a generator suspended at the YIELD_VALUE at `lasti` continues: the
    next instruction (after the yield's caches, were the version to give it any)."""
    info = _code_info(code)
    return info.instrs[info.owner(lasti)].end


REDUCERS = {types.GeneratorType: reduce_generator}


def reducers(context):
    return REDUCERS
