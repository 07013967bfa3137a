"""Portal's runtime inside the interpreter process.

Loaded by portal-run's bootstrap line, never imported by user code.  Keeps the
program's view of the interpreter exactly that of `python3 script.py`: nothing here
runs during the program unless an error reaches one of its loops.
"""

__version__ = "0.1.0"
# The instrumenter's version: a cache of instrumented code made by another one is
# never used.  Here, not in instrument.py, so that a cache hit does not import ast.
INSTRUMENT_VERSION = 11
# The builtins the instrumented code calls (run/instrument.py writes the calls,
# run/runtime.py installs them, bytecode/ and rescue/ find them in code objects):
# a loop's handler calls RESCUE_NAME(LOOP_LINE), a marked iteration starts with
# ITERATION_NAME(LOOP_LINE, ...).  Spelled once, here, importable at start-up.
RESCUE_NAME = "__portal_rescue__"
ITERATION_NAME = "__portal_iteration__"
