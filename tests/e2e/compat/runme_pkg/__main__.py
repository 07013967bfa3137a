"""`-m runme_pkg` runs this as __main__ after importing the package."""
import sys

from . import helper

print("name", __name__, "package", __package__, "spec", __spec__.name)
print("argv", sys.argv)
print("helper", helper.VALUE)
