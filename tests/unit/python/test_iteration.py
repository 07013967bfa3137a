"""iteration.py with instrument.py: a loop whose body calls .backward() notes the
random generators' states at the start of each iteration; other loops do not."""
import ast
import builtins
import random
import sys

import numpy as np
import pytest

from _portal.run import instrument
from _portal.fidelity import iteration
from _portal.run.instrument import compile_user_source
from _portal.checkpoint.program import ProcessState

TRAINING = """
import random
import numpy as np
class Loss:
    def backward(self):
        pass
draws = []
for step in range(3):
    draws.append((random.random(), np.random.random()))
    Loss().backward()
    if step == 1:
        raise MemoryError("fake")
"""

PLAIN = """
total = 0
for i in range(3):
    total += i
def helper(loss):
    loss.backward()     # inside a function the loop defines: not the loop's own call
for j in range(2):
    def inner(loss):
        loss.backward()
"""


def calls_to(code, name):
    found = name in code.co_names
    return found or any(calls_to(c, name) for c in code.co_consts if hasattr(c, "co_names"))


def test_only_loops_that_call_backward_are_marked():
    assert calls_to(compile_user_source(TRAINING, "t.py"), instrument.ITERATION_NAME)
    assert not calls_to(compile_user_source(PLAIN, "p.py"), instrument.ITERATION_NAME)


def test_the_mark_is_the_first_statement_with_its_location():
    tree, wrapped = instrument.instrument(ast.parse(TRAINING))
    loop = next(n for n in tree.body if isinstance(n, ast.For))
    first = loop.body[0].body[0]           # inside the try of the wrap
    assert isinstance(first, ast.Expr) and first.value.func.id == instrument.ITERATION_NAME
    assert first.value.args[0].value == loop.lineno
    assert (first.lineno, first.col_offset) == (loop.body[0].body[1].lineno, loop.body[0].body[1].col_offset)


def test_a_while_loop_is_marked_too():
    source = "n = 0\nwhile n < 2:\n    n += 1\n    x.backward()\n"
    tree, _ = instrument.instrument(ast.parse(source))
    loop = tree.body[1].body[0]            # the try wraps the while statement
    assert isinstance(loop, ast.While) and loop.body[0].value.func.id == instrument.ITERATION_NAME


@pytest.fixture
def installed(monkeypatch):
    monkeypatch.setattr(builtins, instrument.ITERATION_NAME, iteration.iteration_start, raising=False)
    monkeypatch.setattr(builtins, instrument.RESCUE_NAME, lambda *a: None, raising=False)
    iteration._MARKS.clear()
    yield
    iteration._MARKS.clear()


def test_the_states_at_the_failed_iterations_start_are_kept(installed):
    random.seed(7)
    np.random.seed(7)
    code = compile_user_source(TRAINING, "t.py")
    globals_ = {"__name__": "t"}
    with pytest.raises(MemoryError):
        exec(code, globals_)
    loop_code = code                       # the loop is at module level
    marks = iteration.at_start(loop_code, 8)
    assert marks is not None
    # The failed iteration (step 1) drew one number after its mark: rolled back,
    # the generator draws it again.
    random.setstate(iteration.random_state(marks["random"]))
    np.random.set_state(marks["numpy"])
    assert (random.random(), np.random.random()) == globals_["draws"][1]


def test_a_mark_copies_randoms_state_and_gives_back_exactly_getstate():
    random.seed(11)
    random.random()
    random.gauss(0.0, 1.0)               # leaves a gauss_next behind
    noted = iteration._random_mark()
    assert noted[0] == "snapshot"        # the cheap copy, not getstate()'s 625 ints
    expected = random.getstate()
    random.random()
    random.gauss(0.0, 1.0)
    assert iteration.random_state(noted) == expected
    random.setstate(iteration.random_state(noted))
    assert random.getstate() == expected


def test_a_layout_that_disagrees_falls_back_to_getstate(monkeypatch):
    from _portal import _rngstate
    monkeypatch.setattr(_rngstate, "internal_state", lambda snap: (0,) * 625)
    monkeypatch.setattr(iteration, "_SNAPSHOT", [])
    random.seed(3)
    noted = iteration._random_mark()
    assert noted == random.getstate()     # the exact, slower way
    assert iteration.random_state(noted) == noted


def test_numpy_is_noted_only_for_a_body_that_mentions_it():
    tree, _ = instrument.instrument(ast.parse(TRAINING))
    mark = next(n for n in tree.body if isinstance(n, ast.For)).body[0].body[0].value
    assert [a.value for a in mark.args[:2]] == [8, True]
    tree, _ = instrument.instrument(ast.parse("for i in x:\n    y.backward()\n"))
    assert [a.value for a in tree.body[0].body[0].body[0].value.args[:2]] == [1, False]


def test_roll_back_replaces_the_captured_generators():
    marks = {"random": ("r",), "numpy": ("n",), "torch": "T", "cuda": None}
    process = ProcessState(argv=[], orig_argv=[], cwd="/", environ={}, path=[],
                           random_state="old", numpy_state="old",
                           plugins={"torch_state": {"rng": "old", "cuda_rng": "old-cuda"}})
    iteration.roll_back(process, marks)
    assert process.random_state == ("r",) and process.numpy_state == ("n",)
    assert process.plugins["torch_state"] == {"rng": "T", "cuda_rng": "old-cuda"}


TRAINER = """
class Trainer:
    def fit(self):
        for epoch in range(3):
            self._train_epoch()
    def _train_epoch(self):
        for batch in self.loader:
            self._step(batch)
    def _step(self, batch):
        self.model(batch).sum().backward()
    def evaluate(self):
        for batch in self.loader:
            self.model(batch)
def helper(loss):
    loss.backward()
total = 0
for i in range(3):
    total += i
"""


def marked_loops(source):
    tree, _ = instrument.instrument(ast.parse(source))
    return sorted(n.value.args[0].value for n in ast.walk(tree)
                  if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
                  and getattr(n.value.func, "id", None) == instrument.ITERATION_NAME)


def test_a_loop_that_calls_backward_through_the_modules_functions_is_marked():
    # fit -> _train_epoch -> _step -> backward(): both loops; evaluate()'s loop and
    # the arithmetic loop at module level are not.
    assert marked_loops(TRAINER) == [4, 7]


def test_numpy_is_noted_when_the_module_mentions_it_anywhere():
    source = ("import numpy as np\nclass D:\n    def __getitem__(self, i):\n"
              "        return np.random.rand()\nfor b in x:\n    y.backward()\n")
    tree, _ = instrument.instrument(ast.parse(source))
    loop = next(n for n in tree.body if isinstance(n, ast.For))
    assert [a.value for a in loop.body[0].body[0].value.args[:2]] == [5, True]


def test_the_count_of_each_live_iterator_is_noted_weakly(installed):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader
    from torch.utils.data import dataloader as module
    from _portal.torch import dataloader
    dataloader._patch(module)
    it = iter(DataLoader(list(range(8)), batch_size=2))
    next(it)
    iteration.iteration_start(1)
    marks = iteration.at_start(sys._getframe().f_code, 1)
    next(it)
    assert [(ref(), count) for ref, count in marks["loaders"] if ref() is it] == [(it, 1)]
    iteration.roll_back(ProcessState(argv=[], orig_argv=[], cwd="/", environ={}, path=[]), marks)
    assert iteration.batches_at_start(marks, it) == 1
    made_since = iter(DataLoader(list(range(8)), batch_size=2))
    assert iteration.batches_at_start(marks, made_since) == iteration.MADE_SINCE
    assert iteration.batches_at_start(None, it) is None   # nothing rolled back: saved as it is
    del it
    import gc
    gc.collect()
    assert all(ref() is None or ref() is made_since for ref, _ in marks["loaders"])


def test_the_loop_targets_are_passed_to_the_mark():
    tree, _ = instrument.instrument(ast.parse("for i, (x, y) in z:\n    x = x / 2\n    y.backward()\n"))
    mark = tree.body[0].body[0].body[0].value
    assert mark.args[2].value == ("i", "x", "y")
    assert [n.id for n in mark.args[3].elts] == ["i", "x", "y"]
    tree, _ = instrument.instrument(ast.parse("while n:\n    y.backward()\n"))
    assert len(tree.body[0].body[0].body[0].value.args) == 1     # a while loop binds nothing


def test_a_rebound_target_is_saved_as_the_iteration_started(installed):
    from _portal.checkpoint.program import EMPTY, FrameState
    source = ("def train(batches):\n    for x in batches:\n        x = Batch(x * 10)\n"
              "        x.backward()\n")

    class Batch(float):
        def backward(self):
            if self > 10:
                raise MemoryError("fake")

    globals_ = {"__name__": "t", "Batch": Batch}
    exec(compile_user_source(source, "t.py"), globals_)
    train = globals_["train"]
    with pytest.raises(MemoryError):
        train([Batch(0.5), Batch(2)])
    marks = iteration.at_start(train.__code__, 2)
    iteration.roll_back(ProcessState(argv=[], orig_argv=[], cwd="/", environ={}, path=[]), marks)
    slot = train.__code__.co_varnames.index("x")
    saved = [EMPTY] * train.__code__.co_nlocals
    saved[slot] = 20.0                                   # as the failed iteration left it
    reduced = iteration.reduce_frame_state(FrameState(train, 0, saved, [], None), marks)
    assert reduced[2]["locals"][slot] == 2               # the batch it was given
    saved[slot] = EMPTY                                  # dead at the resume point: stays so
    assert iteration.reduce_frame_state(FrameState(train, 0, saved, [], None), marks)[2]["locals"][slot] is EMPTY
    assert iteration.reduce_frame_state(FrameState(train, 0, saved, [], None), None) is NotImplemented


def test_the_programs_own_generators_are_saved_as_the_iteration_started(installed):
    import pickle
    from _portal.fidelity import generator_states
    torch = pytest.importorskip("torch")

    class Augment:
        def __init__(self):
            self.np_rng = np.random.default_rng(1)
            self.legacy = np.random.RandomState(2)
            self.gen = torch.Generator().manual_seed(3)
            self.rnd = random.Random(4)

        def draw(self):
            return (self.np_rng.random(), self.legacy.rand(), torch.rand(1, generator=self.gen).item(),
                    self.rnd.random())

    augment = Augment()
    iteration.iteration_start(1)
    marks = iteration.at_start(sys._getframe().f_code, 1)
    first = augment.draw()
    iteration.roll_back(ProcessState(argv=[], orig_argv=[], cwd="/", environ={}, path=[]), marks)
    copy = Augment.__new__(Augment)
    copy.np_rng, copy.legacy, copy.gen, copy.rnd = pickle.loads(
        pickled_as_saved((augment.np_rng, augment.legacy, augment.gen, augment.rnd), marks))
    assert copy.draw() == first                          # the failed iteration's draws again
    assert augment.draw() != first                       # the program's own objects untouched
    assert generator_states.find(sys._getframe())         # found from this frame's locals


def test_a_bit_generator_the_program_holds_is_saved_as_the_iteration_started(installed):
    import pickle
    bits = np.random.PCG64(5)          # numpy 2 keeps a Generator's state in its bit generator
    iteration.iteration_start(1)
    marks = iteration.at_start(sys._getframe().f_code, 1)
    first = bits.random_raw(3).tolist()
    iteration.roll_back(ProcessState(argv=[], orig_argv=[], cwd="/", environ={}, path=[]), marks)
    assert pickle.loads(pickled_as_saved(bits, marks)).random_raw(3).tolist() == first
    assert bits.random_raw(3).tolist() != first          # the program's own one untouched


class _Weakable:
    pass


def _search_from_here(hold_locals):
    import weakref
    from _portal.fidelity import generator_states
    obj = _Weakable()
    ref = weakref.ref(obj)
    held = locals() if hold_locals else None      # 3.11: the frame's own dict; 3.13: a copy
    before = dict(held) if hold_locals else None
    generator_states.find(sys._getframe())
    del obj
    return ref() is None, held, before


def test_the_search_keeps_nothing_of_the_frame_alive():
    freed, _, _ = _search_from_here(hold_locals=False)
    assert freed      # it read the frame's variables in place: no dict of them left behind


def test_the_search_leaves_a_locals_dict_the_program_holds_as_it_was():
    freed, held, before = _search_from_here(hold_locals=True)
    assert not freed and isinstance(held["obj"], _Weakable) and held["hold_locals"] is True
    assert held == before       # not filled again with the variables bound since


def test_the_search_finds_generators_through_each_kind_of_container():
    import collections
    from _portal.fidelity import generator_states

    class Rng(random.Random):            # a subclass of a generator kind
        pass

    class Holder:
        pass
    in_ordered, in_list, in_tuple, own = random.Random(1), random.Random(2), Rng(3), Rng(4)
    holder = Holder()
    holder.hooks = collections.OrderedDict(a=in_ordered)        # a dict subclass
    holder.items = [0, "x", (in_tuple,), [in_list]]              # sequences in sequences
    holder.rng = own
    not_a_dict = Holder()
    not_a_dict.__class__ = type("Claims", (Holder,), {"__class__": property(lambda self: dict)})
    not_a_dict.inner = random.Random(5)  # looked into by its own type: its attributes
    found = generator_states.find(sys._getframe())
    for rng in (in_ordered, in_list, in_tuple, own, not_a_dict.inner):
        assert any(g is rng for g in found)
    assert not any(g is holder for g in found)


def test_the_search_keeps_no_class_of_the_programs_alive():
    import gc
    import weakref
    from _portal.fidelity import generator_states

    def made():
        cls = type("Made", (), {})
        obj = cls()
        obj.rng = random.Random(6)
        return cls, obj
    cls, obj = made()
    ref = weakref.ref(cls)
    assert any(g is obj.rng for g in generator_states.find(sys._getframe()))
    del cls, obj
    gc.collect()
    assert ref() is None


def pickled_as_saved(obj, marks):
    """`obj` pickled with the plug-ins' reducers, as the capture pickles it when it
    rolls back to `marks`."""
    import io
    import pickle
    from _portal.checkpoint.context import PickleContext
    from _portal.state import plugins
    exact, inherited = plugins.reducers(PickleContext(marks=marks))

    class Pickler(pickle.Pickler):
        def reducer_override(self, obj):
            reduce = exact.get(type(obj)) or next((inherited[k] for k in type(obj).__mro__ if k in inherited), None)
            return reduce(obj) if reduce is not None else NotImplemented

    buffer = io.BytesIO()
    Pickler(buffer, protocol=5).dump(obj)
    return buffer.getvalue()


def test_a_marked_loop_notes_the_numbers_its_body_rebinds_and_reads_later(installed):
    """`epoch += 1` in a handler, `prev` read before it is stored: noted as the
    iteration starts (numbers, strings, None only); `batch`, stored before any
    read, and a list are not."""
    source = """
class Loss:
    def backward(self):
        pass
def main():
    epoch, prev, seen = 0, None, []
    for step in range(4):
        batch = step * 2
        delta = batch - (prev or 0)
        try:
            if step == 2:
                raise KeyError
        except KeyError:
            epoch += 1
        seen = seen + [delta]
        prev = batch
        Loss().backward()
        if step == 3:
            raise MemoryError("fake")
main()
"""
    tree, _ = instrument.instrument(ast.parse(source))
    mark = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and
                getattr(n.func, "id", None) == instrument.ITERATION_NAME)
    assert [k.arg for k in mark.keywords] == ["rebound"]
    assert mark.keywords[0].value.value == ("prev", "epoch", "seen")
    with pytest.raises(MemoryError):
        exec(compile_user_source(source, "m.py"), {"__name__": "m"})
    [marks] = iteration._MARKS.values()
    assert marks["targets"] == {"step": 3, "prev": 4, "epoch": 1}


def test_the_snapshot_takes_the_programs_own_random_too():
    """Portal's start-up imports random (and _random) before the program and
    forgets them (boot.py): the program's generator is an instance of another
    _random.Random type object, of the same C code: the snapshot takes it."""
    import importlib
    from _portal import _rngstate
    import _random
    saved = sys.modules.pop("_random")
    try:
        other = importlib.import_module("_random")
    finally:
        sys.modules["_random"] = saved
    assert other.Random is not _random.Random
    rng = other.Random(3)
    rng.random()
    # _random.Random's own getstate(): the 625 words of the state, as the snapshot's
    assert _rngstate.internal_state(_rngstate.snapshot(rng)) == rng.getstate()
    with pytest.raises(TypeError):
        _rngstate.snapshot(object())


def test_a_marked_loop_notes_numpy_numbers_its_body_rebinds_but_not_arrays(installed):
    """`total += x.sum()` makes a numpy.float64: immutable and small, noted like a
    float, so the rerun gets it back; an array the body rebinds is not kept."""
    source = """
import numpy as np
class Loss:
    def backward(self):
        pass
def main():
    total, flag, arr = 0.0, False, np.zeros(3)
    for step in range(4):
        total += np.arange(3.0).sum()
        flag = flag ^ np.bool_(step % 2)
        arr = arr + 1
        Loss().backward()
        if step == 3:
            raise MemoryError("fake")
main()
"""
    with pytest.raises(MemoryError):
        exec(compile_user_source(source, "m.py"), {"__name__": "m"})
    [marks] = iteration._MARKS.values()
    noted = marks["targets"]
    assert noted["total"] == 9.0 and type(noted["total"]) is np.float64
    flag = np.bool_(False)
    for step in range(3):               # the iterations before the failed one
        flag = flag ^ np.bool_(step % 2)
    assert noted["flag"] == flag and type(noted["flag"]) is np.bool_
    assert "arr" not in noted


def test_a_mark_keeps_numbers_strings_and_small_tensors_only():
    """What a mark keeps of a rebound variable (iteration._kept): immutable scalars,
    a tensor of at most 1 MiB, a tuple of a few (an LSTM's (h, c)); nothing else,
    which would stay alive a whole iteration."""
    torch = pytest.importorskip("torch")    # noqa: F841 - the host's Debian python has it
    small = torch.zeros(2, 3, 8)
    assert iteration._kept(3) and iteration._kept("s") and iteration._kept(None) and iteration._kept(np.float64(1))
    assert iteration._kept(small) and iteration._kept((small, small))
    assert iteration._kept(torch.zeros(1 << 18))             # exactly 1 MiB of float32
    assert not iteration._kept(torch.zeros((1 << 18) + 1))
    assert not iteration._kept((small, torch.zeros(1 << 19)))
    assert not iteration._kept((small,) * 9) and not iteration._kept(())
    assert not iteration._kept([small]) and not iteration._kept({"h": small})
    assert not iteration._kept(torch.nn.Parameter(small))     # a model's own: never rebound as a state
    assert not iteration._kept(np.zeros(3))
