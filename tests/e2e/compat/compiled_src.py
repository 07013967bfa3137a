"""Compiled by the test to compiled.pyc, which python runs as bytecode."""
import sys

print("name", __name__, "file", __file__, "argv", sys.argv, "path0", sys.path[0])
