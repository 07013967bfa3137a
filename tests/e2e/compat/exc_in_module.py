"""An exception raised inside the user's imported module, at import time of a
second module and when called."""
import failing_mod

print("imported", failing_mod.__name__)
try:
    import failing_at_import
except RuntimeError as exc:
    print("caught at import:", exc)
failing_mod.explode(3)
