"""Run with -m from the corpus directory: __name__, sys.argv[0] (the module's file),
sys.path[0] (the working directory), __spec__."""
import sys

print("name", __name__)
print("argv", sys.argv)
print("orig_argv", sys.orig_argv)
print("path0", sys.path[0])
print("file", __file__)
print("spec", __spec__.name, __spec__.origin, "package", repr(__package__))
print("keys", sorted(globals()))
print("modules has runpy", "runpy" in sys.modules)
if sys.argv[1:] == ["fail"]:
    import failing_mod
    failing_mod.explode(1)
print("modules", list(sys.modules))
print("path_importer_cache", list(sys.path_importer_cache))
