"""The names of a code object's fast-local slots, in slot order.

Kept apart from liveness.py, and importing nothing, because the runtime needs it
at start-up (frame_locals.py reads a frame's variables through it at every loop
mark) and the liveness analysis costs ~40 ms to import there.
"""


def slot_names(code):
    """The names of the fast-local slots (localsplus) in slot order: locals, then
    cells that are not arguments, then free variables (an argument that is a cell
    has one slot)."""
    nlocalsplus = code.co_nlocals + len(code.co_cellvars) + len(code.co_freevars)
    names = []
    for i in range(nlocalsplus):
        try:
            names.append(code._varname_from_oparg(i))
        except (AttributeError, IndexError, ValueError):
            break
    return names
