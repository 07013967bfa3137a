"""_portal.torch.dataloader: a DataLoader iterator saved mid-epoch and rebuilt continues
with exactly the batches the original would have given next, without loading the
earlier ones again (map-style: the sampler is fast-forwarded, indices only).

Each test takes k batches from an iterator, saves it (Portal's pickler with the
plug-ins' reducers), lets the original run on (the reference), puts the RNGs back
to their state at the save (as a resumed process has them), loads the copy and
compares.  The datasets count their __getitem__ calls in a file (worker processes
append to it too).
"""
import os

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, Dataset, IterableDataset, RandomSampler  # noqa: E402

from _portal.torch import dataloader  # noqa: E402
from _portal.state import plugins
from _portal.checkpoint import reducers

import torch.utils.data.dataloader as _dl  # noqa: E402

dataloader._patch(_dl)  # what the import hook does in a program run by portal-run


class Counted(Dataset):
    """Map-style: item i is (i, i*i); every __getitem__ appends i to `log`."""

    def __init__(self, n, log):
        self.n, self.log = n, log

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        with open(self.log, "a") as f:
            f.write(f"{os.getpid()} {i}\n")
        return torch.tensor([i, i * i])


class CountedStream(IterableDataset):
    def __init__(self, n, log):
        self.n, self.log = n, log

    def __iter__(self):
        for i in range(self.n):
            with open(self.log, "a") as f:
                f.write(f"{os.getpid()} {i}\n")
            yield torch.tensor([i])


def loaded(log, since=0, pids=None):
    """The indices __getitem__ was called with, after the first `since` calls (by
    the processes `pids` only, if given)."""
    if not os.path.exists(log):
        return []
    with open(log) as f:
        calls = [line.split() for line in f.read().splitlines()][since:]
    return [int(i) for pid, i in calls if pids is None or int(pid) in pids]


def rng_states(generators):
    return torch.get_rng_state(), [g.get_state() for g in generators]


def set_rng_states(states, generators):
    torch.set_rng_state(states[0])
    for g, s in zip(generators, states[1]):
        g.set_state(s)


def roundtrip(obj):
    exact, inherited = plugins.reducers()
    data, buffers = reducers.dumps({"x": obj}, reducers=exact, subclass_reducers=inherited,
                                   modules={})
    restored = reducers.loads(data, buffers)["x"]
    dataloader.finish()  # what restore_process() does before the frames go on
    return restored


def as_lists(batches):
    return [b.tolist() for b in batches]


def saved_mid_epoch(loader, k, generators, epochs_before=0):
    """(iterator after k batches of epoch epochs_before+1, its restored copy, the
    copy of the loader (saved with it, as a program's variable), the RNG states at
    the save)."""
    for _ in range(epochs_before):
        list(loader)
    it = iter(loader)
    for _ in range(k):
        next(it)
    states = rng_states(generators)
    copy_loader, copy = roundtrip((loader, it))
    assert dataloader.loader_of(copy) is copy_loader
    return it, copy, copy_loader, states


@pytest.mark.parametrize("which", ["default", "loader", "sampler"])
def test_single_process_continues_with_the_next_batch(tmp_path, which):
    log = str(tmp_path / "calls")
    ds = Counted(50, log)
    g = torch.Generator().manual_seed(7)
    torch.manual_seed(3)
    if which == "default":
        loader = DataLoader(ds, batch_size=4, shuffle=True)
    elif which == "loader":
        loader = DataLoader(ds, batch_size=4, shuffle=True, generator=g)
    else:
        loader = DataLoader(ds, batch_size=4, sampler=RandomSampler(ds, generator=g))
    it, copy, copy_loader, states = saved_mid_epoch(loader, 5, [g], epochs_before=1)
    expected = as_lists(it)
    expected_next_epoch = as_lists(loader) if which != "default" else None
    before = len(loaded(log))

    set_rng_states(states, [g])
    copy_g = copy_loader.generator if which == "loader" else None
    got = as_lists(copy)
    assert got == expected and len(got) == 13 - 5
    # Only the remaining batches' items were loaded: none of the 5 batches before.
    assert sorted(loaded(log, before)) == sorted(i for b in expected for i, _ in b)
    assert type(copy) is _dl._SingleProcessDataLoaderIter
    if expected_next_epoch is not None:
        # The sampler's generator (a copy) is where the original's was: the next
        # epoch is the same too.
        assert as_lists(copy_loader) == expected_next_epoch
        assert copy_g is None or copy_g is not g


def test_rebuild_leaves_every_rng_as_it_found_it(tmp_path):
    ds = Counted(20, str(tmp_path / "calls"))
    loader = DataLoader(ds, batch_size=3, shuffle=True)
    it = iter(loader)
    next(it), next(it)
    exact, inherited = plugins.reducers()
    data, buffers = reducers.dumps({"x": it}, reducers=exact, subclass_reducers=inherited, modules={})
    copy = reducers.loads(data, buffers)["x"]
    torch.manual_seed(12345)
    state = torch.get_rng_state()
    dataloader.finish()
    assert torch.equal(state, torch.get_rng_state())
    assert copy._num_yielded == 2 and len(as_lists(copy)) == 7 - 2


@pytest.mark.parametrize("persistent", [False, True])
def test_worker_processes_continue_with_the_next_batch(tmp_path, persistent):
    log = str(tmp_path / "calls")
    ds = Counted(40, log)
    g = torch.Generator().manual_seed(11)
    loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=2, generator=g,
                        persistent_workers=persistent)
    # Persistent workers: the second epoch reuses the iterator (its _reset path).
    it, copy, copy_loader, states = saved_mid_epoch(loader, 3, [g], epochs_before=1 if persistent else 0)
    expected = as_lists(it)
    expected_next_epoch = as_lists(loader)

    set_rng_states(states, [g])
    got = as_lists(copy)
    assert got == expected and len(got) == 10 - 3
    assert type(copy) is _dl._MultiProcessingDataLoaderIter
    # New worker processes, which loaded the remaining batches and nothing else.
    pids = {w.pid for w in copy._workers}
    assert not pids & {w.pid for w in it._workers}
    assert sorted(loaded(log, pids=pids)) == sorted(i for b in expected for i, _ in b)
    assert copy._base_seed == it._base_seed
    restored_loader = copy_loader
    if persistent:
        assert restored_loader._iterator is copy
    assert as_lists(restored_loader) == expected_next_epoch
    for done in (it, copy, loader._iterator, restored_loader._iterator):
        if done is not None:  # now, not at a later collection (which waits seconds)
            done._shutdown_workers()


def test_iterable_dataset_is_fast_forwarded_by_replay(tmp_path):
    log = str(tmp_path / "calls")
    loader = DataLoader(CountedStream(10, log), batch_size=2)
    it = iter(loader)
    next(it), next(it), next(it)
    copy = roundtrip(it)
    # The copy fetched (and dropped) the 3 batches already given: a replay.
    assert loaded(log, 6) == list(range(6))
    expected = as_lists(it)
    assert as_lists(copy) == expected == [[[6], [7]], [[8], [9]]]


def test_a_restored_iterator_can_be_saved_again(tmp_path):
    g = torch.Generator().manual_seed(2)
    loader = DataLoader(Counted(30, str(tmp_path / "calls")), batch_size=4, shuffle=True, generator=g)
    it = iter(loader)
    next(it)
    once = roundtrip(it)
    expected = as_lists(it)
    assert as_lists([next(once)]) == expected[:1]
    twice = roundtrip(once)  # a second suspension, in the resumed process
    assert as_lists(twice) == expected[1:]


def test_a_persistent_loader_is_referred_to_weakly(tmp_path):
    loader = DataLoader(Counted(8, str(tmp_path / "calls")), batch_size=4, num_workers=1,
                        persistent_workers=True)
    it = iter(loader)
    next(it)
    assert dataloader.loader_of(it) is loader and it._portal_loader is not loader
    del loader  # the program drops the loader but holds its iterator
    with pytest.raises(TypeError, match="its DataLoader .* is gone"):
        dataloader.reduce_iterator(it, None)
    it._shutdown_workers()


def test_an_iterator_made_before_the_patch_is_refused_by_name():
    class Unpatched(_dl._SingleProcessDataLoaderIter):
        pass
    it = object.__new__(Unpatched)
    with pytest.raises(TypeError, match="the RNG states its epoch started from were not noted"):
        dataloader.reduce_iterator(it, None)
