"""Static maps of CPython bytecode that capture and restore rely on: the names
callers use, re-exported from the bytecode layer (python/_portal/bytecode/).

* `parse_exception_table(code)`, `instructions(code)`, `line_at(code, offset)`: bytecode/decode.py
* `static_stack_depths(code)`, `stack_kinds(code)`, `for_iter_depth`: bytecode/stack.py
* `find_loop(code, loop_line)`, `find_loops`, `in_body`, `call_site(code, lasti)`,
  `with_sites(code)`, `rescue_lines(code)`: bytecode/resume_points.py
* `dead_locals_at(code, offset)`, `live_locals_at`, `slot_names`: bytecode/liveness.py

Everything raises `NotResumable(reason)` when the bytecode does not have the
shape that resuming needs, and `CodeMapError` when the bytecode contradicts what
the layer knows of the running version (a bug there).  Importing this module on
a CPython version without bytecode tables raises
`bytecode.tables.UnsupportedPython` (an ImportError) naming the known ones.
"""
from _portal.bytecode.decode import info as _info, instructions, line_at, parse_exception_table
from _portal.bytecode.liveness import (dead_locals_at, live as _live, live_locals_at,
                                       slot_names)
from _portal.bytecode.model import (CallSite, CodeMapError, ExceptionEntry, Instr,
                                    LoopSite, NotResumable, RESCUE_NAME, WithSite)
from _portal.bytecode.resume_points import (call_site, find_loop, find_loops, in_body,
                                            rescue_lines, with_sites)
from _portal.bytecode.stack import for_iter_depth, stack_kinds, static_stack_depths

__all__ = [
    "NotResumable", "CodeMapError",
    "ExceptionEntry", "Instr", "LoopSite", "CallSite",
    "parse_exception_table", "instructions", "line_at", "static_stack_depths", "in_body",
    "stack_kinds", "find_loop", "find_loops", "call_site", "for_iter_depth",
    "dead_locals_at", "live_locals_at", "RESCUE_NAME", "WithSite", "with_sites",
    "slot_names", "rescue_lines",
]
