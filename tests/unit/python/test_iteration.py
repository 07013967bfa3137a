"""iteration.py with instrument.py: a loop whose body calls .backward() notes the
random generators' states at the start of each iteration; other loops do not."""
import ast
import builtins
import random
import sys

import numpy as np
import pytest

from _portal import instrument, iteration
from _portal.instrument import compile_user_source
from _portal.state import ProcessState

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
    random.setstate(marks["random"])
    np.random.set_state(marks["numpy"])
    assert (random.random(), np.random.random()) == globals_["draws"][1]


def test_numpy_is_noted_only_for_a_body_that_mentions_it():
    tree, _ = instrument.instrument(ast.parse(TRAINING))
    mark = next(n for n in tree.body if isinstance(n, ast.For)).body[0].body[0].value
    assert [a.value for a in mark.args] == [8, True]
    tree, _ = instrument.instrument(ast.parse("for i in x:\n    y.backward()\n"))
    assert [a.value for a in tree.body[0].body[0].body[0].value.args] == [1]


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
    assert [a.value for a in loop.body[0].body[0].value.args] == [5, True]


def test_the_count_of_each_live_iterator_is_noted_weakly(installed):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader
    from torch.utils.data import dataloader as module
    from _portal import dataloader
    dataloader._patch(module)
    it = iter(DataLoader(list(range(8)), batch_size=2))
    next(it)
    iteration.iteration_start(1)
    marks = iteration.at_start(sys._getframe().f_code, 1)
    next(it)
    assert [(ref(), count) for ref, count in marks["loaders"] if ref() is it] == [(it, 1)]
    iteration.roll_back(ProcessState(argv=[], orig_argv=[], cwd="/", environ={}, path=[]), marks)
    assert iteration.batches_at_start(it) == 1
    made_since = iter(DataLoader(list(range(8)), batch_size=2))
    assert iteration.batches_at_start(made_since) == iteration.MADE_SINCE
    iteration.at_start(sys._getframe().f_code, 1)      # the next loop's capture
    assert iteration.batches_at_start(it) is None
    del it
    assert all(ref() is None or ref() is made_since for ref, _ in marks["loaders"])
