"""Prints a ready marker, then waits in one long sleep for a signal to arrive
(SIGINT gives a KeyboardInterrupt traceback, SIGTERM kills silently)."""
import sys
import time

print("some output before the signal")
print("an error line before the signal", file=sys.stderr)
print("ready", flush=True)
time.sleep(60)
print("timed out waiting for the signal")
