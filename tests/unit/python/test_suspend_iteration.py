"""_portal.rescue.point_state's count of the iteration a suspended loop is in, from its
iterator: `iteration N (0-based)` in the report, the job record and the manifest.

What an iterator tells by itself; a 3.12+ range iterator's count, which needs the
loop's bytecode, is tested in test_range_loops.py."""

from _portal.rescue import point_state


def advanced(it, n):
    for _ in range(n):
        next(it)
    return it


def test_a_list_or_an_enumerate_tells_its_count_by_itself():
    assert point_state._index(advanced(iter([5, 6, 7, 8]), 3)) == ("iteration", 2)
    assert point_state._index(advanced(enumerate("abcdef"), 5)) == ("iteration", 4)
    assert point_state._index(iter([1, 2])) is None          # nothing given yet
