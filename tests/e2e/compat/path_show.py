"""sys.path[0] is the script's directory; __file__ and sys.argv[0] as python sets them."""
import os
import sys

print("argv0", sys.argv[0])
print("file", __file__)
print("path0", sys.path[0])
print("path", sys.path)
print("cwd", os.getcwd())
print("safe_path", sys.flags.safe_path)
