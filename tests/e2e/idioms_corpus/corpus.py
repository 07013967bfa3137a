"""What the idioms of the corpus share: values printed to the last bit, a digest
of a final state, and the real shortage the harness asks for.

The harness (test_idioms_corpus.py) reads each idiom's marker comments:

    # corpus: POINT@HIT[=KIND]   on a line: a fake out-of-memory error of KIND when
                                 that line starts for the HIT-th time (POINT is
                                 before, inside or after the main computation)
    # corpus: real@HIT           on the line that calls grow(): a real shortage there
    # corpus-names: A, B         what a `will differ:` line must mention to name
                                 what this idiom's failed iteration changed
    # corpus-declines: POINT: W  a known limit: at POINT the job is declined, and
                                 the reason says W (any other decline fails)
"""
import hashlib
import os


def exact(value):
    """A float, a numpy array's or a tensor's sum, to the last bit."""
    if hasattr(value, "detach"):
        value = value.detach()
    if hasattr(value, "sum"):
        value = value.sum()
    return float(value).hex()


def digest(*things):
    """sha256 over tensors, arrays, state_dicts, bytes and str, in order."""
    h = hashlib.sha256()
    for thing in things:
        if isinstance(thing, dict):
            for name, tensor in thing.items():
                h.update(str(name).encode())
                h.update(digest(tensor).encode())
            continue
        if hasattr(thing, "detach"):
            thing = thing.detach().contiguous().numpy()
        if hasattr(thing, "tobytes"):
            thing = thing.tobytes()
        if isinstance(thing, str):
            thing = thing.encode()
        h.update(thing)
    return h.hexdigest()[:32]


# A real shortage, for the harness's run under `portal-run --mem 1G`: with
# CORPUS_GROW_AT=N in the environment, the calls N-2, N-1 and N of grow() ask for
# a buffer written at once, growing 64, 256, 1152 MiB: the last passes the cap
# and is refused inside the program (its allocation fails: a MemoryError), after
# the iteration's main computation.  Freed at once: nothing of it stays, and
# without CORPUS_GROW_AT (python's run) grow() does nothing but count.
GROWTH_MIB = (64, 256, 1152)
_GROWN = {"calls": 0}


def grow():
    _GROWN["calls"] += 1
    at = os.environ.get("CORPUS_GROW_AT")
    if not at:
        return
    k = _GROWN["calls"] - int(at) + len(GROWTH_MIB) - 1
    if 0 <= k < len(GROWTH_MIB):
        _GROWN["size"] = len(b"\1" * (GROWTH_MIB[k] << 20))
