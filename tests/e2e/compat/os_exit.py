"""os._exit skips the buffered output, atexit handlers and finally blocks."""
import atexit
import os
import sys

atexit.register(print, "atexit must not run")
print("flushed before _exit", flush=True)
print("buffered, lost at _exit")
sys.stderr.write("stderr before _exit\n")
try:
    os._exit(7)
finally:
    print("finally must not run")
