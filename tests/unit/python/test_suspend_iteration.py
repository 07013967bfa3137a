"""_portal.suspend's count of the iteration a suspended loop is in, from its
iterator: `iteration N (0-based)` in the report, the job record and the manifest.

A range iterator tells how many items it gave in 3.11 (`__reduce__`'s third item);
from 3.12 on it keeps only the range still to come, and the count follows from the
start and step of the `range(...)` call the code makes it with
(codemap.range_origin), where `range` is the builtin."""
import builtins

from _portal import suspend


def advanced(it, n):
    for _ in range(n):
        next(it)
    return it


def test_a_list_or_an_enumerate_tells_its_count_by_itself():
    assert suspend._index(advanced(iter([5, 6, 7, 8]), 3)) == ("iteration", 2)
    assert suspend._index(advanced(enumerate("abcdef"), 5)) == ("iteration", 4)
    assert suspend._index(iter([1, 2])) is None          # nothing given yet


def test_a_range_is_counted_from_the_start_and_step_of_its_call():
    for start, stop, step in [(0, 10, 1), (-4, 40, 3), (2**70, 2**70 + 9, 2), (9, 0, -2)]:
        it = advanced(iter(range(start, stop, step)), 3)
        # with the call's start and step: the same count on every version
        assert suspend._index(it, (start, step)) == ("iteration", 2), (start, stop, step)
    # a start or step that does not fit what is left is not a count
    it = advanced(iter(range(0, 30, 3)), 3)
    rest = it.__reduce__()[2]
    if rest is None:        # 3.12+: the iterator alone does not tell
        assert suspend._index(it) is None
        assert suspend._index(it, (1, 3)) is None        # 9 - 1 is no multiple of 3
        assert suspend._index(it, (0, 2)) is None        # another step
        assert suspend._index(it, (12, 3)) is None       # a start past where it is
    else:                   # 3.11: it does, whatever the code says
        assert suspend._index(it, (1, 3)) == ("iteration", 2)


def test_range_must_be_the_builtin_where_the_loop_looks_it_up():
    assert suspend._builtin_range_in({}, "global")
    assert suspend._builtin_range_in({"range": range}, "name")
    assert not suspend._builtin_range_in({"range": lambda n: iter(range(1, n))}, "global")
    assert not suspend._builtin_range_in({}, "fast")
    saved = builtins.range
    builtins.range = lambda *a: saved(*a)
    try:
        assert not suspend._builtin_range_in({}, "global")
    finally:
        builtins.range = saved
