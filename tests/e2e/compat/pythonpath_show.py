"""PYTHONPATH entries come after the script's directory."""
import sys

import extra_mod

print("path head", sys.path[:3])
print(extra_mod.WHERE, extra_mod.__file__)
