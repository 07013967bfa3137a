"""itertools objects in a loop's state: count, islice, chain, cycle, product (their
reducers are among the pickler's own, reducers.py; dataloader.py's override cycle
and chain where a DataLoader is imported).

Up to CPython 3.13 these types pickle themselves (__reduce__/__setstate__) and
nothing here is registered.  CPython 3.14 removed that, so a loop over
`cycle(loader)` or `chain(loaders)` would be declined; there Portal reads the
objects' fields through its own C module (_portal._itertools,
src/native/itertools_state.c: per version, layouts checked by size at import) and
saves each as a function of this module that builds a fresh object and fills its
state (the types of the program's own itertools module: it may be another copy than
the one Portal imported at start-up).  A type whose layout did not check is not in
_itertools.SUPPORTED (names) and is
declined by name as before, like every other itertools type.

cycle_parts()/chain_parts() give what the 3.13 __reduce__ gives on every version
and reduce_cycle_parts()/reduce_chain_parts() the reduce tuple back, so that
dataloader.py (the DataLoader rollback) and generator_states.py (a cycle's
position) read one shape everywhere.
"""
import sys

# The version from which the types no longer pickle themselves.
OWN_STATE_FROM = (3, 14)
NATIVE = sys.version_info >= OWN_STATE_FROM
# A 3.14 cycle's index while it draws from (and saves) its iterator.
CYCLE_FIRST_PASS = -1

if NATIVE:
    from _portal import _itertools
else:
    _itertools = None


def _itertools_module():
    import itertools
    return itertools


def saveable_cycle():
    """Whether a cycle's state can be read on this interpreter."""
    return not NATIVE or "cycle" in _itertools.SUPPORTED


def saveable_chain():
    return not NATIVE or "chain" in _itertools.SUPPORTED


# --- cycle -------------------------------------------------------------------------------

def cycle_parts(c):
    """(iterator, kept, passed) of an itertools.cycle as 3.13 pickles it: the iterator
    it draws from, the list of the first pass's items, whether the first pass is over
    (then the iterator is one over `kept`, at the next item to give)."""
    if not NATIVE:
        _, (it, ), (kept, passed) = c.__reduce__()
        return it, kept, passed
    it, kept, index = _itertools.state(c)
    if index == CYCLE_FIRST_PASS:
        return it, kept, False
    it = iter(kept)                 # past the first pass: at kept[index]
    if index:
        it.__setstate__(index)
    return it, kept, True


def reduce_cycle_parts(it, kept, passed):
    if not NATIVE:
        return _itertools_module().cycle, (it, ), (kept, passed)
    if not passed:
        return _rb_cycle, (it, kept, CYCLE_FIRST_PASS)
    # past the first pass `it` is an iterator over `kept` (cycle_parts, dataloader.py):
    # the 3.14 type keeps only the index of its next item
    reduced = it.__reduce__()
    if type(it) is not type(iter([])) or reduced[0] is not iter:
        raise TypeError(f"cannot save a cycle past its first pass over a {type(it).__name__}")
    at = reduced[2] if len(reduced) > 2 else len(kept)
    return _rb_cycle, (None, kept, at if at < len(kept) else 0)


def _rb_cycle(it, kept, index):
    c = _itertools_module().cycle(())
    _itertools.fill_cycle(c, it, kept, index)
    return c


# --- chain -------------------------------------------------------------------------------

def chain_parts(c):
    """(source, active) of an itertools.chain: the iterator over its iterables and
    the iterator of the one it is in, each None where it has none."""
    if not NATIVE:
        state = c.__reduce__()[2:3]
        state = state[0] if state else ()
        return (tuple(state) + (None, None))[:2]
    return _itertools.state(c)


def reduce_chain_parts(source, active):
    if NATIVE:
        return _rb_chain, (source, active)
    chain = _itertools_module().chain
    if source is None:
        return chain, ()
    return chain, (), (source, ) if active is None else (source, active)


def _rb_chain(source, active):
    c = _itertools_module().chain()
    _itertools.fill_chain(c, source, active)
    return c


# --- count, islice, product (3.14 only) --------------------------------------------------

def _reduce_count(c):
    cnt, long_cnt, step = _itertools.state(c)
    count = _itertools_module().count
    if long_cnt is None:            # fast mode: an int, step 1
        return count, (cnt, )
    return count, (long_cnt, ) if type(step) is int and step == 1 else (long_cnt, step)


def _reduce_islice(s):
    it, next_, stop, step, taken = _itertools.state(s)
    if it is None:                  # exhausted
        return _itertools_module().islice, (iter(()), 0)
    return _rb_islice, (it, next_, None if stop == -1 else stop, step, taken)


def _rb_islice(it, next_, stop, step, taken):
    s = _itertools_module().islice(it, next_, stop, step)
    _itertools.fill_islice(s, taken)
    return s


def _reduce_product(p):
    pools, indices, started, stopped = _itertools.state(p)
    product = _itertools_module().product
    if stopped:
        return product, ((), )
    if not started:
        return product, pools
    return _rb_product, (pools, indices)


def _rb_product(pools, indices):
    p = _itertools_module().product(*pools)
    _itertools.fill_product(p, indices)
    return p


def _reduce_cycle(c):
    return reduce_cycle_parts(*cycle_parts(c))


def _reduce_chain(c):
    return reduce_chain_parts(*chain_parts(c))


def reducers(context):
    if not NATIVE or "itertools" not in sys.modules:
        return {}
    itertools = sys.modules["itertools"]
    table = {itertools.count: _reduce_count, itertools.islice: _reduce_islice,
             itertools.chain: _reduce_chain, itertools.cycle: _reduce_cycle,
             itertools.product: _reduce_product}
    return {t: reduce for t, reduce in table.items() if t.__name__ in _itertools.SUPPORTED}
