"""Run from a zip application built by the test (zipapp_src -> app.pyz)."""
import sys

import zhelper

print("name", __name__, "file", __file__)
print("argv", sys.argv, "path0", sys.path[0])
print("helper", zhelper.__name__, zhelper.__file__)
print("loader", type(__loader__).__name__)
zhelper.fail_if(sys.argv[1:] == ["fail"])
