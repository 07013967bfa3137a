"""Run by a relative path (sub/where.py, ./where.py from sub): the directory of the
script comes first on sys.path, so its sibling module imports."""
import sys

import sibling

print("argv0", sys.argv[0])
print("file", __file__)
print("path0", sys.path[0])
print("sibling", sibling.__name__, sibling.__file__, sibling.WHERE)
