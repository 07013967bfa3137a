"""A loop over items whose every iteration draws a random number first, then
does its work (where the tests make it run out of memory), then keeps the
result.  `python3 items.py 2,6` leaves items 2 and 6 out after their draws: what
a run under --policy oom.action=skip that skipped them must give.  BIG names
items that allocate far more than portal-run --mem allows (a real OOM)."""
import hashlib
import os
import random
import sys

LEAVE_OUT = {int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "").split(",") if x}
BIG = {int(x) for x in os.environ.get("ITEMS_BIG", "").split(",") if x}
BIG_BYTES = 8 << 30


def work(i, r):
    if i in BIG:
        blob = bytearray(BIG_BYTES)   # more than the cap: MemoryError
        return len(blob)
    return round(i * r, 12)


def main():
    random.seed(1234)
    kept = []
    for i in range(12):
        r = random.random()
        if i in LEAVE_OUT:
            continue
        value = work(i, r)
        kept.append(value)
        print("item", i, value, flush=True)
    print("digest", hashlib.sha256(repr(kept).encode()).hexdigest())


main()
