"""A directory run as a program: python runs its __main__.py."""
import sys

import app_helper

print("name", __name__, "file", __file__)
print("argv", sys.argv, "path0", sys.path[0])
print("helper", app_helper.__file__)
