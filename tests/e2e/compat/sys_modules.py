"""What the interpreter imported before the program: a program can tell extra
modules apart (e.g. `import importlib` then `importlib.machinery` works only if
something else imported it)."""
import importlib
import sys

print(list(sys.modules))
print("importlib.machinery reachable", hasattr(importlib, "machinery"))
print("importlib.util reachable", hasattr(importlib, "util"))
