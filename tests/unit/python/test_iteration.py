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
