"""bytecode/stores.py: the stores into objects and the container calls a failed
iteration made on its path to the error (decide.py names those of the state)."""
import builtins
import linecache
import sys

import pytest

from _portal.bytecode import codemap
from _portal.run import instrument
from _portal.bytecode import stores
from _portal.run.instrument import compile_user_source


@pytest.fixture
def found(monkeypatch, tmp_path):
    """Runs a program whose loop raises MemoryError; the rescue builtin records
    [(verb, text, line, root)] that stores.py finds for the loop the error reached."""
    seen = []

    def rescue(loop_line, *rest):
        frame = sys._getframe(1)
        exc = sys.exc_info()[1]
        tb = exc.__traceback__
        while tb.tb_frame is not frame:
            tb = tb.tb_next
        site = codemap.find_loop(frame.f_code, loop_line, lasti=frame.f_lasti)
        if not seen:
            seen.append([(s.verb, s.text, s.line, s.root)
                         for s in stores.stored_before(frame.f_code, site, tb.tb_lasti)])
        return False
    monkeypatch.setattr(builtins, instrument.RESCUE_NAME, rescue, raising=False)

    def run(source):
        path = str(tmp_path / "s.py")
        lines = source.splitlines(True)
        linecache.cache[path] = (len(source), None, lines, path)
        stores._TREES.pop(path, None)
        try:
            with pytest.raises(MemoryError):
                exec(compile_user_source(source, path), {"__name__": "s"})
        finally:
            linecache.cache.pop(path, None)
        return seen[0]
    return run


def test_item_attribute_and_augmented_stores_and_container_calls(found):
    assert found("""
class T:
    step = 0
def main(counts, stats, t, history, log):
    for i in range(3):
        counts[i % 2] += 1
        stats["n"] = i
        t.step += 1
        history.append(i)
        log.setdefault("k", []).extend([i])
        if i == 1:
            raise MemoryError
        counts[0] = 0            # after the error: not run
        history.append(-1)
main([0, 0], {}, T(), [], {})
""") == [("changed", "counts[i % 2]", 6, "counts"), ("changed", 'stats["n"]', 7, "stats"),
         ("changed", "t.step", 8, "t"), ("called", "history.append", 9, "history"),
         ("called", 'log.setdefault', 10, "log"), ("called", 'log.setdefault("k", []).extend', 10, "log")]


def test_a_branch_that_cannot_reach_the_error_is_not_on_the_path(found):
    assert found("""
def main(d, out):
    for i in range(3):
        if i == 5:
            d["x"] = 1
            continue
        if i == 1:
            raise MemoryError
        d["y"] = i
main({}, [])
""") == []


def test_the_call_that_raised_is_not_counted(found):
    class Boom(list):
        def append(self, item):
            raise MemoryError
    builtins._stores_boom = Boom
    try:
        assert found("""
def main(out):
    for i in range(3):
        out.append(i)
main(_stores_boom())
""") == []
    finally:
        del builtins._stores_boom


def test_a_store_in_a_handler_of_the_body_is_on_the_path(found):
    assert found("""
def main(state):
    n = 0
    while n < 5:
        try:
            if n == 2:
                raise KeyError
        except KeyError:
            state["restarts"] = state.get("restarts", 0) + 1
        if n == 2:
            raise MemoryError
        n += 1
main({})
""") == [("changed", 'state["restarts"]', 9, "state")]


def test_in_place_methods_and_augmented_variables_are_found_for_the_tensor_judge(found):
    """A trailing-underscore method (torch's in-place convention) and an augmented
    assignment to a variable are found as "in place" (stores_changed.py keeps those
    whose object is a tensor of the state); not the methods whose result does not
    depend on what the tensor held (zero_, fill_ of a constant; normal_ and the
    other draws: test_inplace_method_names)."""
    class T:
        def __getattr__(self, name):
            return self if name == "data" else (lambda *a: self)

        def __isub__(self, other):
            return self
    builtins._stores_t = T
    try:
        assert found("""
def main(params, buf):
    for i in range(3):
        for p in params:
            p.data.add_(-0.1)
            p -= 1
            p.zero_()
            p.fill_(0)
            p.fill_(i)
        buf.mul_(0.9).add_(1)
        if i == 1:
            raise MemoryError
        buf.sub_(1)              # after the error: not run
main([_stores_t()], _stores_t())
""") == [("in place", "p.data.add_", 5, "p"), ("in place", "p -= 1", 6, "p"),
         ("in place", "p.fill_", 9, "p"), ("in place", "buf.mul_", 10, "buf"),
         ("in place", "buf.mul_(0.9).add_", 10, "buf")]
    finally:
        del builtins._stores_t


def test_inplace_method_names():
    import ast
    call = lambda src: ast.parse(src, mode="eval").body    # noqa: E731
    assert stores.inplace_method("add_") and stores.inplace_method("addcmul_")
    assert stores.inplace_method("fill_", call("t.fill_(t.mean())"))
    assert not stores.inplace_method("fill_", call("t.fill_(0.5)"))
    for name in ("zero_", "normal_", "requires_grad_", "__iadd__", "_private_", "append", "add"):
        assert not stores.inplace_method(name), name


def test_read_goes_through_instance_dictionaries_and_builtin_containers_only():
    import ast

    class Holder:
        def __init__(self):
            self.log = {"loss": [1]}

        @property
        def hidden(self):       # never run
            raise AssertionError("a property ran")
    h = Holder()
    scope = {"h": h, "k": "loss"}.get
    assert stores.read(ast.parse('h.log[k]', mode="eval").body, lambda n: scope(n, stores.UNKNOWN)) == [1]
    assert stores.read(ast.parse('h.hidden', mode="eval").body, lambda n: scope(n, stores.UNKNOWN)) \
        is stores.UNKNOWN
    assert stores.read(ast.parse('f().x', mode="eval").body, lambda n: scope(n, stores.UNKNOWN)) \
        is stores.UNKNOWN
