"""PORTAL_FAKE_OOM's spec matching: a suffix names whole trailing parts of a path."""
import pytest

from _portal.run import fake_oom


@pytest.mark.parametrize("suffix, filename, meant", [
    ("t.py", "/w/t.py", True),
    ("t.py", "t.py", True),
    ("t.py", "/usr/lib/python3/dist-packages/torch/_dynamo/eval_frame_dist.py", False),
    ("u.py", "/usr/lib/python3/dist-packages/sympy/simplify/fu.py", False),
    ("work/t.py", "/tmp/x/work/t.py", True),
    ("work/t.py", "/tmp/x/homework/t.py", False),
    ("/tmp/x/t.py", "/tmp/x/t.py", True),
    ("<string>", "<string>", True),
    ("t.py", "/w/t.pyc", False),
])
def test_a_suffix_is_whole_parts_of_the_path(suffix, filename, meant):
    spec, = fake_oom.parse(f"{suffix}:3")
    assert spec.matches(filename) is meant
