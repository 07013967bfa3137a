"""Interpreter-wide state a program might read."""
import sys

print("flags", sys.flags)
print("warnoptions", sys.warnoptions, "xoptions", sys._xoptions)
print("executable", sys.executable, "prefix", sys.prefix, sys.base_prefix)
print("stdin", sys.stdin.isatty(), sys.stdin.name, sys.stdout.name, sys.stderr.name)
print("buffering", sys.stdout.line_buffering, sys.stderr.line_buffering, sys.stdout.write_through)
print("recursion", sys.getrecursionlimit(), "switch", sys.getswitchinterval())
print("hooks", sys.excepthook is sys.__excepthook__, sys.displayhook is sys.__displayhook__)
print("last", hasattr(sys, "last_type"), hasattr(sys, "last_value"))
print("exc", sys.exc_info())
print("trace", sys.gettrace(), "profile", sys.getprofile())
print("meta_path", [getattr(f, "__name__", type(f).__name__) for f in sys.meta_path])
print("path_hooks", len(sys.path_hooks))
print("path_importer_cache", list(sys.path_importer_cache))
