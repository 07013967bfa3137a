"""rng_check.py: a loop without marks is judged against the latest mark of a loop
around it on the stack: a generator unchanged since says nothing, one that drew
is named, one never noted is named unless still as its seed made it."""
import random
import sys

import pytest

from _portal.fidelity import iteration, rng_check

LINE = 10_001      # the outer loop's line, as its mark gives it


def _judge(draw):
    """An unmarked loop's frame, called under a marked one: rng_check's verdict
    after `draw()` ran in it."""
    def outer():
        iteration.iteration_start(LINE, True)      # the mark of an epoch loop's iteration
        return inner()

    def inner():
        draw()
        return rng_check.will_differ(sys._getframe(), 7, {}, None)
    return outer()


def test_nothing_drawn_since_the_enclosing_mark_is_silent():
    assert _judge(lambda: None) == []


def test_a_draw_of_randoms_generator_is_named():
    [line] = _judge(random.random)
    assert line.startswith("random draws of the failed iteration are not rolled back: random's generator (")


def test_numpys_global_generator_is_compared_too():
    np = pytest.importorskip("numpy")
    assert _judge(lambda: np.random.seed(np.random.randint(1 << 30))) != []
    [line] = _judge(np.random.random)
    assert "numpy's global generator" in line and "random's generator" not in line


def test_a_generator_object_never_noted_is_named_unless_still_as_seeded():
    np = pytest.importorskip("numpy")

    def loop(draws):
        rng = np.random.default_rng(5)          # made after the mark: never noted
        if draws:
            rng.standard_normal()
        return rng_check.will_differ(sys._getframe(), 7, {"local 'rng'": rng}, None)

    def outer(draws):
        iteration.iteration_start(LINE, True)
        return loop(draws)
    assert outer(False) == []
    [line] = outer(True)
    assert "'rng' (numpy.random.Generator)" in line and "random's" not in line


def test_same_compares_arrays_and_tensors_by_value():
    np = pytest.importorskip("numpy")
    a = ("MT19937", np.arange(4, dtype=np.uint32), 3)
    assert rng_check._same(a, ("MT19937", np.arange(4, dtype=np.uint32), 3))
    assert not rng_check._same(a, ("MT19937", np.arange(1, 5, dtype=np.uint32), 3))
