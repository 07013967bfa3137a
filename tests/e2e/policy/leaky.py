"""Memory that a fresh process does not have: a cache held by a library module
(not the program's state, so not in the checkpoint) fills most of the memory
portal-run --mem allows, and item 3 then needs more than is left.  In a fresh
process (oom.action=retry) the item fits.  The result is that of python3
leaky.py run with memory to spare."""
import hashlib
import json          # stands for a library that keeps a cache of its own

LEAK_BYTES = 640 << 20
ITEM_BYTES = 640 << 20

json.portal_test_cache = bytearray(LEAK_BYTES)   # not the program's own state
done = []
for i in range(6):
    if i == 3:
        block = bytearray(ITEM_BYTES)
        done.append(len(block))
        del block
    else:
        done.append(i)
    print("item", i, flush=True)
json.portal_test_cache = None
print("digest", hashlib.sha256(repr(done).encode()).hexdigest())
