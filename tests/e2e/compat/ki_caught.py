"""A KeyboardInterrupt the program catches: it cleans up and exits normally."""
import sys
import time

try:
    print("ready", flush=True)
    time.sleep(60)
except KeyboardInterrupt:
    print("caught KeyboardInterrupt, cleaning up")
    print("cleanup message", file=sys.stderr)
    sys.exit(3)
