"""Saving torch DataLoader iterators (a plug-in: plugins.MODULES).

torch refuses to pickle a DataLoader iterator, and its state is mostly not worth
saving: worker processes, queues, batches prefetched by the workers.  What decides
which batch comes next is small: the DataLoader, the RNG states the iterator's
epoch started from, and how many batches it has yielded (k).  So an iterator is
saved as exactly that, and rebuilt on restore:

    the RNG states the sampler and the base seed drew from (torch's default
    generator, the loader's and the samplers' own generators, `random`,
    numpy's global RNG) are set to what they were when the epoch started;
    a fresh iterator is made over the same DataLoader (worker processes
    started again, with the same _base_seed); its *sampler* is advanced by
    the k batches of indices already yielded (indices only: no __getitem__
    runs for them); then every RNG is put back to the state it had before the
    rebuild.

The next batch the rebuilt iterator gives is batch k, the one an uninterrupted
run would have produced next (the failed iteration's own batch is in the loop's
frame and is saved with it).

The iterator does not keep those RNG states (nor its DataLoader): an import patch
(plugins.import_patches) makes `_BaseDataLoaderIter.__init__` and `_reset` note
them, a few KiB per epoch, when torch.utils.data.dataloader is first imported.

Iterable-style datasets have no sampler to advance: the rebuilt iterator is
fast-forwarded by fetching and dropping k batches (replay: the dataset's
iterator runs again from its start).  Limits (docs/data-loading.md): a worker's
own RNG (random augmentation inside __getitem__ with num_workers > 0) starts
afresh from its seed in the new workers; a sampler must draw only from the RNGs
listed above, and must not share its generator with the loop's body.
"""
import sys

from _portal.state.passthrough import drop_own_frame   # imports nothing but sys (plugins.import_patches)

_DATALOADER = "torch.utils.data.dataloader"

# Iterators unpickled but not yet rebuilt: restore_process() rebuilds them once the
# whole state is loaded (every object complete), before the frames are re-entered,
# so that worker processes are forked from a process with nothing half-built.
_PENDING = []


# --- RNG snapshots -------------------------------------------------------------------------

def _generators(loader):
    """The explicit torch generators the loader's sampling may draw from."""
    torch = sys.modules["torch"]
    found = []
    candidates = [getattr(loader, "generator", None)]
    for owner in (getattr(loader, "sampler", None), getattr(loader, "batch_sampler", None),
                  getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
        if owner is not None:
            candidates.append(getattr(owner, "generator", None))
    for g in candidates:
        if isinstance(g, torch.Generator) and g is not torch.default_generator and \
                all(g is not f for f in found):
            found.append(g)
    return found


def snapshot(loader):
    """The states of every RNG the loader's sampling may draw from:
    (default generator state, [(generator, state)], random state, numpy state)."""
    torch = sys.modules["torch"]
    rnd = sys.modules.get("random")
    np = sys.modules.get("numpy")
    return (torch.default_generator.get_state(),
            [(g, g.get_state()) for g in _generators(loader)],
            rnd.getstate() if rnd is not None else None,
            np.random.get_state() if np is not None else None)


def apply(snap):
    torch = sys.modules["torch"]
    default, explicit, rnd_state, np_state = snap
    torch.default_generator.set_state(default)
    for g, state in explicit:
        g.set_state(state)
    if rnd_state is not None:
        import random
        random.setstate(rnd_state)
    if np_state is not None:
        import numpy
        numpy.random.set_state(np_state)


# --- the import patch ----------------------------------------------------------------------

def _patch(module):
    base = module._BaseDataLoaderIter
    if getattr(base, "_portal_patched", False):
        return
    import weakref
    init, reset, next_ = base.__init__, base._reset, base.__next__
    live = weakref.WeakSet()   # the iterators alive now: iteration.py notes their counts

    # Whatever goes wrong here must not change the program's data loading: the
    # iterator is then only not saveable (reduce_iterator says so).
    def __init__(self, loader, *args, **kwargs):
        try:
            self._portal_loader = _reference(loader)
            self._portal_rng_init = snapshot(loader)
            live.add(self)
        except Exception:
            self._portal_loader = self._portal_rng_init = None
        self._portal_rng_epoch = self._portal_rng_first = self._portal_rng_after = None
        try:
            init(self, loader, *args, **kwargs)
        except BaseException as exc:
            drop_own_frame(exc)   # no frame of Portal's in the program's traceback
            raise

    def _reset(self, loader, first_iter=False, *args, **kwargs):
        if not first_iter:  # a persistent-workers iterator starting another epoch
            try:
                self._portal_rng_epoch = snapshot(loader)
            except Exception:
                self._portal_rng_init = None
        try:
            return reset(self, loader, first_iter, *args, **kwargs)
        except BaseException as exc:
            drop_own_frame(exc)
            raise

    # A single-process iterator's sampler draws its permutation when the first
    # batch is asked for, not when the iterator is made: the program may have drawn
    # in between (zip(loader_a, loader_b) makes both iterators first).  Noted once
    # per epoch, before that first batch.
    def __next__(self):
        if self._num_yielded == 0 and self._portal_rng_first is None and self._num_workers == 0:
            try:
                self._portal_rng_first = snapshot(loader_of(self))
            except Exception:
                self._portal_rng_init = None
        try:
            batch = next_(self)
        except BaseException as exc:   # a Dataset's error, StopIteration at the epoch's end
            drop_own_frame(exc)
            raise
        # The epoch's sampling has drawn (rng_check.py: nothing drawn since, in a
        # loop over this iterator, is nothing drawn by its failed iteration).
        if self._num_yielded == 1:
            try:
                self._portal_rng_after = snapshot(loader_of(self))
            except Exception:
                self._portal_rng_after = None
        return batch

    for fn, old in ((__init__, init), (_reset, reset), (__next__, next_)):
        fn.__name__, fn.__qualname__, fn.__doc__ = old.__name__, old.__qualname__, old.__doc__
        fn.__wrapped__ = old
    base.__init__, base._reset, base.__next__ = __init__, _reset, __next__
    base._portal_live = live
    base._portal_patched = True


def _reference(loader):
    """What the iterator keeps of its loader.  A persistent-workers loader keeps
    its iterator (loader._iterator): a weak reference back, so that no cycle
    delays the workers' shutdown when the program drops the loader.  Any other
    iterator may outlive its loader (`for b in DataLoader(...)`): a strong one."""
    if getattr(loader, "persistent_workers", False) and getattr(loader, "num_workers", 0) > 0:
        import weakref
        return weakref.ref(loader)
    return loader


def loader_of(it):
    """The DataLoader `it` iterates (None if unknown or gone)."""
    import weakref
    ref = getattr(it, "_portal_loader", None)
    return ref() if isinstance(ref, weakref.ref) else ref


def import_patches():
    return {_DATALOADER: _patch}


# --- saving ----------------------------------------------------------------------------------

def _rb_shell(cls):
    return object.__new__(cls)


def _fill_later(shell, state):
    _PENDING.append((shell, state))


def _batches_to_keep(it, marks):
    """The count the iterator is saved with: the count when the failed iteration
    started (iteration.py), so that the batches it took are delivered again; an
    iterator made inside the failed iteration is saved exhausted: where the program
    makes one only when the last one ran out (`except StopIteration: it =
    iter(loader)`), the iteration takes that path again, as it did."""
    from _portal.fidelity import iteration
    at_start = iteration.batches_at_start(marks, it)
    if at_start == iteration.MADE_SINCE:
        module = sys.modules[_DATALOADER]
        if it._dataset_kind == module._DatasetKind.Map:
            try:
                return len(it._index_sampler)   # indices only: no batch is loaded
            except TypeError:
                pass
        return it._num_yielded
    if at_start is not None and at_start < it._num_yielded:
        return at_start
    return it._num_yielded


def reduce_iterator(it, marks):
    if getattr(it, "_portal_rng_init", None) is None:
        raise TypeError(f"cannot save {type(it).__name__}: the RNG states its epoch "
                        "started from were not noted (made before Portal's DataLoader "
                        "patch, or they could not be read)")
    loader = loader_of(it)
    if loader is None:
        raise TypeError(f"cannot save {type(it).__name__}: its DataLoader (persistent "
                        "workers) is gone; keep the DataLoader in a variable")
    yielded = _batches_to_keep(it, marks)
    state = {"loader": loader, "yielded": yielded, "base_seed": it._base_seed,
             "rng_init": it._portal_rng_init, "rng_epoch": it._portal_rng_epoch,
             "rng_first": getattr(it, "_portal_rng_first", None) if yielded else None}
    return (_rb_shell, (type(it),), state, None, None, _fill_later)


def reduce_cycle(c, marks):
    """itertools.cycle, as pickle saves it up to 3.14 (itertools_state.py) (its iterator, the items it has kept, whether
    its first pass is over), less the items of the failed iteration when it cycles a
    DataLoader iterator that is wound back (reduce_iterator): they are taken again.
    Past its first pass, at the position noted when the iteration started
    (generator_states.py), when it was found near the loop."""
    from _portal.fidelity import generator_states
    from _portal.state import itertools_state
    it, kept, passed = itertools_state.cycle_parts(c)
    noted = generator_states.state_at_start(marks, c)
    if passed and noted is not None and noted[0] == "again":
        # past its first pass: back to the item it was to give when the iteration started
        again = iter(kept)
        again.__setstate__(noted[1])
        return itertools_state.reduce_cycle_parts(again, kept, passed)
    if not passed and isinstance(it, sys.modules[_DATALOADER]._BaseDataLoaderIter):
        from _portal.fidelity import iteration
        at_start = iteration.batches_at_start(marks, it)
        drop = it._num_yielded - at_start if at_start is not None and at_start >= 0 else 0
        if 0 < drop <= len(kept):
            kept = kept[:len(kept) - drop]
    return itertools_state.reduce_cycle_parts(it, kept, passed)


def _source_back_one(source):
    """A copy of chain's `source` (the iterator over its iterables) one iterable
    back, or None where it cannot tell (a generator: `chain.from_iterable(gen)`)."""
    try:
        rebuild_, args, *rest = source.__reduce__()
    except TypeError:
        return None
    if rebuild_ is not iter or len(args) != 1 or not rest or not isinstance(rest[0], int) \
            or rest[0] < 1:
        return None
    back = iter(*args)
    back.__setstate__(rest[0] - 1)
    return back


def reduce_chain(c, marks):
    """itertools.chain, as pickle saves it up to 3.14 (itertools_state.py) (the iterator over its iterables, the one
    it is in), except where the failed iteration moved it from one DataLoader to the
    next (`next(chain)` took the first loader's last batch in an earlier iteration,
    then made the second's iterator): that iterator, made since the iteration
    started, is not saved; the chain is saved as it stood, at the end of the first,
    so that the resumed iteration makes the second loader's iterator again, drawing
    what it drew (its base seed), and takes its first batch."""
    from _portal.state import itertools_state
    source, active = itertools_state.chain_parts(c)
    if isinstance(active, sys.modules[_DATALOADER]._BaseDataLoaderIter):
        from _portal.fidelity import iteration
        if iteration.batches_at_start(marks, active) == iteration.MADE_SINCE:
            back = _source_back_one(source)
            if back is not None:
                return itertools_state.reduce_chain_parts(back, iter(()))
    return itertools_state.reduce_chain_parts(source, active)


def reducers(context):
    if _DATALOADER not in sys.modules:
        return {}
    import itertools
    from _portal.state import itertools_state
    # Both read the objects through itertools_state.py (their own __reduce__ up to
    # 3.13, Portal's reader from 3.14); where that cannot read a type's layout it
    # is not registered, and the capture declines the object by name.
    marks = context.marks   # the failed iteration's start, which the loaders are wound back to
    return {cls: reduce for cls, reduce, ok in (
        (itertools.cycle, lambda c: reduce_cycle(c, marks), itertools_state.saveable_cycle()),
        (itertools.chain, lambda c: reduce_chain(c, marks), itertools_state.saveable_chain())) if ok}


def subclass_reducers(context):
    module = sys.modules.get(_DATALOADER)
    if module is None:
        return {}
    return {module._BaseDataLoaderIter: lambda it: reduce_iterator(it, context.marks)}


def capture_process():
    # A marker, so that restore_process() runs and rebuilds the iterators.
    return True if _DATALOADER in sys.modules else None


def restore_process(_saved):
    finish()


# --- rebuilding --------------------------------------------------------------------------------

class _Replay:
    """Stands for the loader's index sampler while the iterator is made: gives the
    sampler's iterator, advanced by `skip` batches the first time it is asked for
    a batch (or by fast_forward()), with the RNGs where the epoch started."""

    def __init__(self, index_sampler, skip, rng_epoch):
        self.index_sampler, self.skip, self.rng_epoch = index_sampler, skip, rng_epoch
        self.iterator = None
        self.done = False

    def __iter__(self):
        if self.rng_epoch is None:  # the epoch began with the iterator: its sampler too
            self.iterator = iter(self.index_sampler)
        return self

    def __next__(self):
        self.fast_forward()
        return next(self.iterator)

    def __len__(self):
        return len(self.index_sampler)

    def fast_forward(self):
        if self.done:
            return
        self.done = True
        if self.rng_epoch is not None:  # a later epoch of persistent workers
            apply(self.rng_epoch)
            self.iterator = iter(self.index_sampler)
        for _ in range(self.skip):
            try:
                next(self.iterator)
            except StopIteration:
                break


class _LoaderAs:
    """The DataLoader as the iterator's __init__ sees it, with _Replay for its
    index sampler."""

    def __init__(self, loader, replay):
        object.__setattr__(self, "_loader", loader)
        object.__setattr__(self, "_index_sampler", replay)

    def __getattr__(self, name):
        return getattr(self._loader, name)


def rebuild(shell, state):
    """Make `shell` (an unfilled iterator of the saved class) the iterator it was."""
    module = sys.modules[_DATALOADER]
    loader, k = state["loader"], state["yielded"]
    now = snapshot(loader)
    try:
        apply(state["rng_init"])
        iterable = loader._dataset_kind == module._DatasetKind.Iterable
        replay = _Replay(loader._index_sampler, 0 if iterable else k, state["rng_epoch"])
        type(shell).__init__(shell, _LoaderAs(loader, replay))
        if state.get("rng_first") is not None:   # its sampler started at its first batch
            apply(state["rng_first"])
        replay.fast_forward()
        shell._index_sampler = loader._index_sampler
        shell._sampler_iter = replay.iterator
        shell._portal_loader = _reference(loader)
        shell._portal_rng_init, shell._portal_rng_epoch = state["rng_init"], state["rng_epoch"]
        shell._base_seed = state["base_seed"]
        if iterable:  # no sampler to advance: replay the batches, data and all
            for _ in range(k):
                try:
                    next(shell)
                except StopIteration:
                    break
        shell._num_yielded = k
        shell._portal_rng_first = state.get("rng_first")
    finally:
        apply(now)


def finish():
    """Rebuild every iterator unpickled since the last call."""
    while _PENDING:
        shell, state = _PENDING.pop(0)
        rebuild(shell, state)
