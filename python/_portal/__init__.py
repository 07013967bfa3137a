"""Portal's runtime inside the interpreter process.

Loaded by portal-run's bootstrap line, never imported by user code.  Keeps the
program's view of the interpreter exactly that of `python3 script.py`: nothing here
runs during the program unless an error reaches one of its loops.
"""
