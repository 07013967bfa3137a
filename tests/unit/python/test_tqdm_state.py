"""_portal.state.tqdm_state: `for x in tqdm(items)` saved mid-way continues from its count.

The iterator of such a loop is tqdm.__iter__, a generator of library code
(generators.py saves it) whose frame holds the bar (tqdm_state.py saves it).
"""
import sys
import threading
import time

import pytest

tqdm_std = pytest.importorskip("tqdm.std")
tqdm = tqdm_std.tqdm

from _portal.state import plugins  # noqa: E402
from _portal.checkpoint import reducers


def roundtrip(obj):
    exact, inherited = plugins.reducers()
    data, buffers = reducers.dumps({"x": obj}, reducers=exact, subclass_reducers=inherited,
                                   modules={})
    return reducers.loads(data, buffers)["x"]


def test_the_bar_continues_from_its_count(tmp_path):
    out = open(tmp_path / "bar.txt", "w")
    bar = tqdm(list(range(10)), file=out, mininterval=0, desc="train", ascii=True)
    gen = iter(bar)
    assert [next(gen) for _ in range(4)] == [0, 1, 2, 3]
    time.sleep(0.05)
    elapsed = time.time() - bar.start_t

    saved_gen = roundtrip(gen)
    new_bar = saved_gen.gi_frame.f_locals["self"]
    assert new_bar is not bar and type(new_bar) is tqdm
    assert new_bar.n == bar.n and new_bar.total == 10 and new_bar.desc == "train"
    assert new_bar in tqdm._instances  # a live bar, made by tqdm's own __new__
    assert new_bar.fp is not bar.fp and new_bar.fp.write is not None
    # The elapsed time goes on from where it was, not from the save's clock.
    assert abs((time.time() - new_bar.start_t) - elapsed) < 1.0

    assert list(saved_gen) == [4, 5, 6, 7, 8, 9]
    assert new_bar.n == 10
    out.close()
    text = (tmp_path / "bar.txt").read_text()
    assert "train: 100%" in text and "10/10" in text


def test_the_monitor_thread_is_made_afresh_not_saved():
    bar = tqdm(range(5), file=sys.stderr, mininterval=0, disable=False)
    tqdm.monitor_interval, saved_interval = 10, tqdm.monitor_interval
    try:
        if tqdm.monitor is not None:
            tqdm.monitor.exit()
            tqdm.monitor = None
        copy = roundtrip(bar)
        assert isinstance(tqdm.monitor, threading.Thread) and tqdm.monitor.is_alive()
        assert copy.n == 0 and copy.total == 5
        copy.close()
        bar.close()
    finally:
        tqdm.monitor_interval = saved_interval


def test_a_disabled_bar_is_saved_too():
    bar = tqdm(range(3), disable=True)
    gen = iter(bar)
    next(gen)
    assert list(roundtrip(gen)) == [1, 2]
