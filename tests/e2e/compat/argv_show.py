"""sys.argv and sys.orig_argv exactly as given (options after the script are the script's)."""
import sys

print("argv", sys.argv)
print("orig_argv", sys.orig_argv)
print("executable", sys.executable)
