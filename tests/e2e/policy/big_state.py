"""A loop whose state is large (a few hundred MiB): its checkpoint takes a while
to write, long enough for a second signal to arrive during the write."""
import hashlib
import sys
import time

STATE_BYTES = int(sys.argv[1]) if len(sys.argv) > 1 else 300 << 20
if len(sys.argv) > 2 and sys.argv[2] == "numbered":
    # every 8 bytes a different number: nothing for the writer to skip (zeros) or share
    import numpy
    state = bytearray(numpy.arange(STATE_BYTES // 8, dtype=numpy.uint64).tobytes())
else:
    state = bytearray(STATE_BYTES)
print("ready", flush=True)
for i in range(40):
    state[i * 4096] = i % 251
    time.sleep(0.05)
    print("iteration", i, flush=True)
print("digest", hashlib.sha256(state).hexdigest())
