"""Reached through a symbolic link from another directory: sys.path[0] is the
directory of the link's target, __file__ the link's own path."""
import sys

import real_helper

print("argv0", sys.argv[0])
print("file", __file__)
print("path0", sys.path[0])
print("helper", real_helper.__file__)
