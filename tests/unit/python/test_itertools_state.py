"""_portal.state.itertools_state: count, islice, chain, cycle and product saved mid-iteration
through Portal's pickler (their own __reduce__ up to CPython 3.13, Portal's reader of
their fields, _portal._itertools, from 3.14), and the rest of each stream equal."""
import io
import itertools
import sys

import pytest

from _portal.state import itertools_state, plugins
from _portal.checkpoint import reducers


def roundtrip(obj):
    exact, inherited = plugins.reducers()
    data, buffers = reducers.dumps({"it": obj}, reducers=exact, subclass_reducers=inherited)
    return reducers.Loader(io.BytesIO(data), buffers=buffers).load_state()["it"]


MAKERS = {
    "count": lambda: itertools.count(5, 3),
    "count_default": lambda: itertools.count(),
    "count_float": lambda: itertools.count(2.5, 0.25),
    "count_big": lambda: itertools.count(2 ** 70, -7),
    "count_near_ssize_max": lambda: itertools.count(sys.maxsize - 3),
    "islice": lambda: itertools.islice(itertools.count(), 3, 60, 2),
    "islice_open": lambda: itertools.islice(iter(range(40)), 2, None, 3),
    "islice_stop": lambda: itertools.islice("abcdefgh", 5),
    "chain": lambda: itertools.chain([1, 2], (3,), "abcdef"),
    "chain_from_iterable": lambda: itertools.chain.from_iterable([[1], [], [2, 3, 4], "xyz"]),
    "cycle": lambda: itertools.cycle("abcd"),
    "cycle_iterator": lambda: itertools.cycle(iter(range(5))),
    "product": lambda: itertools.product("ab", range(3), [True, False]),
    "product_repeat": lambda: itertools.product("xy", repeat=3),
}
TAKEN = (0, 1, 3, 6, 11, 30)


@pytest.mark.parametrize("kind", sorted(MAKERS))
@pytest.mark.parametrize("taken", TAKEN)
def test_round_trip_mid_iteration_gives_the_rest_of_the_stream(kind, taken):
    saved, reference = MAKERS[kind](), MAKERS[kind]()
    for it in (saved, reference):
        for _ in itertools.islice(it, taken):
            pass
    if kind == "count_near_ssize_max" and taken == 3 and not itertools_state.NATIVE:
        # at sys.maxsize, between its two modes, the 3.11-3.13 type's own __reduce__
        # fails (SystemError: NULL object passed to Py_BuildValue): declined by name
        with pytest.raises(reducers.Unsaveable, match="itertools.count"):
            roundtrip(saved)
        return
    restored = roundtrip(saved)
    assert type(restored) is type(saved)
    rest = list(itertools.islice(reference, 50))
    assert list(itertools.islice(restored, 50)) == rest
    # the saved object itself is untouched by the save
    assert list(itertools.islice(saved, 50)) == rest


@pytest.mark.parametrize("kind", ["islice_stop", "chain", "product", "cycle_empty"])
def test_exhausted_objects_stay_exhausted(kind):
    it = itertools.cycle(()) if kind == "cycle_empty" else MAKERS[kind]()
    assert list(itertools.islice(it, 1000)) or kind == "cycle_empty"
    assert list(roundtrip(it)) == []


def test_cycle_parts_have_the_3_13_shape():
    c = itertools.cycle("abc")
    next(c)
    it, kept, passed = itertools_state.cycle_parts(c)
    assert (kept, passed) == (["a"], False)     # `it` is the cycle's own: not drawn from
    for _ in range(4):          # a b c | a b: past the first pass, at "c"
        next(c)
    it, kept, passed = itertools_state.cycle_parts(c)
    assert (kept, passed, list(it)) == (["a", "b", "c"], True, ["c"])
    rebuild, args, *state = itertools_state.reduce_cycle_parts(iter(kept), kept, True)
    again = rebuild(*args)
    if state:
        again.__setstate__(state[0])
    assert [next(again) for _ in range(4)] == ["a", "b", "c", "a"]


def test_chain_parts():
    c = itertools.chain([1, 2], "ab")
    assert itertools_state.chain_parts(c)[1] is None
    next(c)
    source, active = itertools_state.chain_parts(c)
    assert list(active) == [2] and list(source) == ["ab"]
    list(c)
    assert itertools_state.chain_parts(c) == (None, None)


@pytest.mark.skipif(not itertools_state.NATIVE, reason="the types pickle themselves before 3.14")
def test_native_reader_checks_layouts_and_refuses_others():
    from _portal import _itertools
    assert set(_itertools.SUPPORTED) == {"count", "islice", "chain", "cycle", "product"}

    class Cycle(itertools.cycle):
        pass

    for other in (itertools.repeat(1), Cycle("ab"), iter([])):
        with pytest.raises(TypeError, match="not an itertools type whose layout"):
            _itertools.state(other)
    # a state the type never makes is refused before it is written
    with pytest.raises(ValueError):
        _itertools.fill_cycle(itertools.cycle(()), None, [1, 2], 2)
    with pytest.raises(ValueError):
        _itertools.fill_cycle(itertools.cycle(()), iter([]), [], 0)
    with pytest.raises(ValueError):
        _itertools.fill_product(itertools.product("ab"), (2,))
    p = itertools.product("ab")
    next(p)
    with pytest.raises(ValueError):
        _itertools.fill_product(p, (0,))


@pytest.mark.skipif(not itertools_state.NATIVE, reason="the types pickle themselves before 3.14")
def test_a_second_copy_of_the_itertools_module_is_read_too():
    # a program importing itertools again after Portal's start-up forgot it (boot.py)
    # gets new type objects (a multi-phase module): they are read all the same
    saved = sys.modules.pop("itertools")
    try:
        import itertools as again
        assert again.count is not saved.count
        c = again.count(4, 2)
        next(c)
        restored = roundtrip(c)
        assert [next(restored) for _ in range(3)] == [6, 8, 10]
    finally:
        sys.modules["itertools"] = saved


@pytest.mark.skipif(not itertools_state.NATIVE, reason="the types pickle themselves before 3.14")
def test_other_itertools_types_still_decline_by_name():
    with pytest.raises(reducers.Unsaveable, match="repeat"):
        roundtrip(itertools.repeat(1, 3))
