"""A frame's local variables, read without changing anything of the program.

Everything of Portal's that looks at a running frame's variables (the search for
the program's generators, the evaluation of an `except` clause's types, the
Condition a waiting thread holds) reads them here, never through `frame.f_locals`
of a function's frame, whose meaning differs between the versions:

* CPython 3.11: reading `f_locals` copies the fast locals into a dict the frame
  keeps (the same dict `locals()` returns, that a program may hold:
  `d = locals()`), so a read would change the program's dict and keep every value
  in it alive for as long as the frame lives;
* CPython 3.13 (PEP 667): `f_locals` is a write-through proxy of the fast locals
  (a write to it is a write to the program's variable), `locals()` a new dict each
  call.

snapshot(frame) reads a function's fast locals in place (the native layer, as the
capture does: `_frames.frame_slots`), so it is the same on every version: a new
plain dict of the variables bound now, cells' contents for cell and free
variables, nothing written, nothing kept.  A frame without fast locals (a module,
a class body, exec) has its namespace dict as its locals: that dict is python's
own namespace, and reading it changes nothing (only copied here).
"""
import types

from _portal import _frames
from _portal.bytecode.slots import slot_names

CO_OPTIMIZED = 0x1      # inspect.CO_OPTIMIZED: a function's frame (fast locals)
_UNBOUND = object()     # an empty slot (C NULL): a local not bound now


def has_fast_locals(frame):
    """Whether the frame's variables are fast locals (a function's frame)."""
    return bool(frame.f_code.co_flags & CO_OPTIMIZED)


def namespace_is_globals(frame):
    """Whether the frame's locals are its globals (a module's frame)."""
    return not has_fast_locals(frame) and frame.f_locals is frame.f_globals


def snapshot(frame):
    """A new dict {name: value} of the frame's variables bound now (see the
    module's docstring); changing it changes nothing of the frame's."""
    if not has_fast_locals(frame):
        return dict(frame.f_locals)
    code = frame.f_code
    nlocalsplus = _frames.frame_info(frame)[0]
    values = _frames.frame_slots(frame, 0, nlocalsplus, _UNBOUND)
    cells = set(code.co_cellvars) | set(code.co_freevars)
    out = {}
    for name, value in zip(slot_names(code), values):
        if value is _UNBOUND:
            continue
        # A cell or free variable's slot holds its cell (the frame's prologue made
        # it); a slot of that name holding another object (an inlined
        # comprehension's own variable, 3.13) is the value itself.
        if name in cells and type(value) is types.CellType:
            try:
                value = value.cell_contents
            except ValueError:      # an empty cell: not bound
                continue
        out[name] = value
    del values
    return out


def value(frame, name, default=None):
    """The value of the frame's variable `name` bound now, else `default`."""
    return snapshot(frame).get(name, default)
