"""Capture: the chain of frames from __main__ down to the loop, read in place.

Called from the loop's rescue handler while the loop frame is still running, so
its value stack (the loop's iterator and anything under it) can be read; the
callers are suspended in their calls.  Each frame becomes a FrameState: where it
continues, its live fast locals, and its stack below the point of re-entry.
Anything that cannot be re-entered faithfully raises Decline with the reason, and
the rescue falls back to the next loop out.
"""
import inspect
import sys

from _portal import _frames
from _portal.bytecode import codemap
from _portal.rescue import tracebacks, withexit
from _portal.bytecode.tables import T as _BYTECODE
from _portal.checkpoint.program import EMPTY, CallInfo, FrameState

CO_GENERATOR = inspect.CO_GENERATOR
CO_NOT_GENERATOR_LIKE = inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE


class Decline(Exception):
    """This loop cannot be the resume point; str() says why."""


def _where(frame):
    line = frame_line(frame)
    at = frame.f_code.co_filename if line is None else f"{frame.f_code.co_filename}:{line}"
    return f"{at} in {frame.f_code.co_name}()"


def frame_line(frame):
    """The line a message names for a frame: its f_lineno, or, for a frame the
    error is passing through (a loop's handler runs there: its instructions have
    no line, and f_lineno is None), the line its entry in the error's traceback
    shows; None where neither says."""
    line = frame.f_lineno
    if line is None:
        exc = sys.exc_info()[1]    # the error the rescue handles
        tb = exc.__traceback__ if exc is not None else None
        while tb is not None:
            if tb.tb_frame is frame:
                line = tb.tb_lineno
            tb = tb.tb_next
    return line


def _fast_locals(frame, nlocalsplus, offset):
    """The frame's fast locals, with those dead at `offset` left out (EMPTY)."""
    values = _frames.frame_slots(frame, 0, nlocalsplus, EMPTY)
    if nlocalsplus == 0:
        return values
    # A with statement whose __exit__ cannot swallow an error does not keep the
    # block's locals alive through its handler (withexit.py).
    never_suppress = withexit.never_suppressing(frame.f_code, frame.f_globals, frame.f_builtins)
    dead = codemap.dead_locals_at(frame.f_code, offset, never_suppress)
    if dead:
        cells = set(frame.f_code.co_cellvars) | set(frame.f_code.co_freevars)
        for i, name in enumerate(codemap.slot_names(frame.f_code)[:nlocalsplus]):
            if name in dead and name not in cells:
                values[i] = EMPTY
    return values


def _state(frame, function, offset, stack, call):
    nlocalsplus = _frames.frame_info(frame)[0]
    # A frame an exception is passing through may report no line (f_lineno None):
    # where it will continue is what the messages name anyway.
    return FrameState(function=function, offset=offset,
                      locals=_fast_locals(frame, nlocalsplus, offset), stack=stack, call=call,
                      filename=frame.f_code.co_filename,
                      line=codemap.line_at(frame.f_code, offset) or frame_line(frame),
                      name=frame.f_code.co_name)


def loop_frame_state(frame, loop_line):
    """The innermost frame: continue at the start of the loop body."""
    try:
        site = codemap.find_loop(frame.f_code, loop_line, lasti=frame.f_lasti)
    except codemap.NotResumable as e:
        raise Decline(f"the loop at {frame.f_code.co_filename}:{loop_line} cannot be resumed: {e}") from None
    nlocalsplus, _, _, function = _frames.frame_info(frame)
    stack = _frames.frame_slots(frame, nlocalsplus, nlocalsplus + site.depth, EMPTY)
    state = _state(frame, function, site.body_start, stack, None)
    # The rescue runs in the body's handler, whose PUSH_EXC_INFO put the exception
    # that was being handled when the body ran right above the body's stack (and
    # the lasti the handler was entered with, if any): the restore makes it the
    # handled exception again (a loop in an `except` block).
    slot = nlocalsplus + site.depth + int(site.lasti)
    handled = _frames.frame_slots(frame, slot, slot + 1, None)[0]
    state.handled = handled if _rebuildable_exception(handled) else None
    return state, site


def raised_in_body(frame, loop_line, exc):
    """Was `exc` raised while the loop's body ran in `frame` (directly, or in a call
    the body made)?  A while statement is wrapped whole (instrument.py), so its
    handler also sees errors of the condition and of the else clause: those are not
    an iteration of this loop.  The frame's traceback entry tells: its tb_lasti is
    the instruction that raised or made the call that raised."""
    try:
        site = codemap.find_loop(frame.f_code, loop_line, lasti=frame.f_lasti)
    except codemap.NotResumable:
        return True  # the capture says why it cannot resume this loop
    if site.body_span is None:
        return True
    tb = tracebacks.loop_entry(exc, frame)
    if tb is None:
        return False
    return codemap.in_body(frame.f_code, site, tb.tb_lasti)


def _rebuildable_exception(exc):
    """Can `exc` be saved and rebuilt as pickle rebuilds an exception, type(exc)(*args)?
    One whose __init__ wants other arguments would make the whole checkpoint
    unloadable: such a handled exception is left out (sys.exception() is then None
    in the resumed except block, and nothing else is lost)."""
    if not isinstance(exc, BaseException):
        return False
    if type(exc).__reduce__ is not BaseException.__reduce__:
        return True  # the class says how it is rebuilt
    try:
        type(exc)(*exc.args)
    except Exception:
        return False
    return True


def _passes_through(callable_, function):
    """Does calling `callable_` (from C) just call `function`?  Returns
    (True, returns_instance) or (False, None)."""
    import functools
    seen = 0
    while isinstance(callable_, functools.partial) and seen < 16:
        callable_, seen = callable_.func, seen + 1
    if isinstance(callable_, _frames.Reenter):
        # The caller was itself re-entered by a resume of this job, which called
        # `function` through this Reenter (or built the instance its __init__ fills).
        if callable_.func is function:
            return True, callable_.result is not None
        return False, None
    if callable_ is function:
        return True, False
    if getattr(callable_, "__func__", None) is function:  # a bound method
        return True, False
    if isinstance(callable_, type):
        if getattr(callable_, "__init__", None) is function:
            return True, True
        return False, None
    call = getattr(type(callable_), "__call__", None)
    if call is function:  # an instance whose class defines __call__ in Python
        return True, False
    return False, None


def _partial_in_call(slot_value, function):
    """Is the caller calling a functools.partial of `function` with one positional
    argument, whose value is in the callable's stack slot?  Such a partial, called
    by vectorcall, puts that argument in the slot just below the call's arguments
    (PY_VECTORCALL_ARGUMENTS_OFFSET) for the duration of the call, so the slot no
    longer shows the partial.  The partial is found among `function`'s referrers
    (it may live on the C stack alone); only at a rescue that needs it."""
    import functools
    import gc
    return any(isinstance(p, functools.partial) and p.func is function
               and len(p.args) == 1 and p.args[0] is slot_value
               for p in gc.get_referrers(function))


def _caller_state(frame, callee, callee_is_entry, callee_function):
    nlocalsplus, _, _, function = _frames.frame_info(frame)
    code = frame.f_code
    if callee.f_code.co_flags & CO_NOT_GENERATOR_LIKE:
        raise Decline(f"{_where(callee)} is a coroutine, which Portal does not resume")
    try:
        site = codemap.call_site(code, frame.f_lasti)
    except codemap.NotResumable as e:
        raise Decline(f"{_where(frame)} cannot be re-entered: {e}") from None
    if callee.f_code.co_flags & CO_GENERATOR:
        # A running generator: only a for loop of the caller driving it can be
        # re-entered (its FOR_ITER asks the re-created generator for the next item).
        if site.kind != "for_iter":
            raise Decline(f"{_where(callee)} is a generator driven by C code or next(), "
                          f"not by a for loop of {_where(frame)}")
        stack = _frames.frame_slots(frame, nlocalsplus, nlocalsplus + site.depth, EMPTY)
        if getattr(stack[-1] if stack else None, "gi_frame", None) is not callee:
            raise Decline(f"the for loop at {_where(frame)} is not iterating {callee.f_code.co_name}()")
        return _state(frame, function, site.resume_offset, stack, CallInfo("for_iter"))
    if site.kind == "for_iter":
        raise Decline(f"{_where(frame)} entered {callee.f_code.co_name}() from its for loop's "
                      "iterator (a __next__ of Python code), which Portal cannot re-enter")
    base = nlocalsplus + site.depth_below_call
    result = EMPTY
    if callee_is_entry:
        # Entered through C: only a known pass-through may be skipped.
        operands = _frames.frame_slots(frame, base, base + 2, EMPTY)
        # 3.11: [NULL, callable] or [method, self]; 3.13: [callable, self_or_null]
        callable_ = _BYTECODE.callable_of(operands, EMPTY, site.kind)
        ok, returns_instance = _passes_through(callable_, callee_function)
        if not ok and operands[0] is EMPTY and _partial_in_call(callable_, callee_function):
            ok, returns_instance = True, False
        if not ok:
            raise Decline(f"{_where(frame)} entered {callee.f_code.co_name}() through "
                          f"{type(callable_).__name__} {getattr(callable_, '__qualname__', '')!s}, "
                          "C code that Portal cannot re-enter")
        if returns_instance:
            result = _frames.frame_slots(callee, 0, 1, EMPTY)[0]  # __init__'s self, dead or not
            if result is EMPTY:
                raise Decline(f"{_where(callee)}: the instance being initialised is not saved")
    stack = _frames.frame_slots(frame, nlocalsplus, base, EMPTY)
    call = CallInfo(site.kind, nargs=site.nargs, has_kwargs=site.has_kwargs, result=result)
    return _state(frame, function, site.resume_offset, stack, call)


def capture_chain(loop_frame, loop_line, main_code, main_globals):
    """[FrameState] from __main__'s module frame (first) to the loop frame (last)."""
    innermost, site = loop_frame_state(loop_frame, loop_line)
    chain = [innermost]
    callee = loop_frame
    while True:
        frame = callee.f_back
        _, _, callee_is_entry, callee_function = _frames.frame_info(callee)
        if frame is None or (callee.f_code is main_code and callee.f_globals is main_globals):
            # __main__'s module frame: the bottom one of a script; under `-m`,
            # runpy's frames below it are made again by the resume (runmodule.py)
            break
        chain.append(_caller_state(frame, callee, callee_is_entry, callee_function))
        callee = frame
    bottom = callee
    if bottom.f_code is not main_code or bottom.f_globals is not main_globals:
        raise Decline(f"the loop is not reached from the main script's top level "
                      f"(the outermost frame is {_where(bottom)})")
    chain[-1].function = None  # __main__'s module frame: re-run from its code
    chain.reverse()
    return chain, site
