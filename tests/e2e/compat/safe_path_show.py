"""Under PYTHONSAFEPATH=1 the script's directory is not put on sys.path."""
import sys

print("safe_path", sys.flags.safe_path)
print("path", sys.path)
try:
    import mymod
    print("mymod imported from", mymod.__file__)
except ImportError as exc:
    print("ImportError:", exc)
