"""rng_names.py against the libraries: a drawing method or function the libraries
have must be in the table (or left out by name, with its reason), so the table
cannot fall behind silently; and instrument.py marks the loops that draw."""
import ast
import random

import pytest

from _portal.run import instrument, rng_names

# Public names that do not draw.
RANDOM_NOT_DRAWING = {"seed", "getstate", "setstate", "VERSION"}
NUMPY_NOT_DRAWING = {"bit_generator", "spawn", "get_state", "set_state", "seed",
                     # numpy.random's classes and helpers
                     "BitGenerator", "Generator", "MT19937", "PCG64", "PCG64DXSM", "Philox",
                     "RandomState", "SFC64", "SeedSequence", "default_rng", "get_bit_generator",
                     "set_bit_generator", "test"}


def _public(obj):
    return {name for name in dir(obj) if not name.startswith("_")}


def test_every_drawing_method_of_random_random_is_in_the_table():
    assert _public(random.Random) - RANDOM_NOT_DRAWING <= rng_names.RANDOM | set()
    assert rng_names.RANDOM <= rng_names.DRAWING


def test_every_drawing_method_and_function_of_numpy_random_is_in_the_table():
    np = pytest.importorskip("numpy")
    public = (_public(np.random.Generator) | _public(np.random.RandomState)
              | {n for n in _public(np.random) if callable(getattr(np.random, n))})
    missing = public - NUMPY_NOT_DRAWING - rng_names.NUMPY - rng_names.NUMPY_LEFT_OUT
    assert not missing, f"numpy.random draws through {sorted(missing)}: add them to rng_names.NUMPY"


def test_torch_samplers_are_in_the_table_and_exist():
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    import torch.nn.init as init
    # every torch function whose name says it samples
    samplers = {n for n in dir(torch) if (n.startswith("rand") or n in ("normal", "bernoulli", "multinomial",
                                                                         "poisson", "binomial"))
                and callable(getattr(torch, n))}
    samplers |= {n for n in dir(torch.Tensor) if n in ("normal_", "uniform_", "bernoulli_", "random_",
                                                       "exponential_", "geometric_", "cauchy_",
                                                       "log_normal_")}
    samplers |= {n for n in dir(F) if "dropout" in n and not n.startswith("_")}
    samplers |= {n for n in dir(init) if n.endswith(("normal_", "uniform_")) and not n.startswith("_")}
    missing = samplers - rng_names.TORCH
    assert not missing, f"torch draws through {sorted(missing)}: add them to rng_names.TORCH"
    # and each name of the table is something torch has (no stale entries)
    where = [torch, torch.Tensor, F, init, torch.distributions.Distribution]
    stale = {n for n in rng_names.TORCH if not any(hasattr(w, n) for w in where)}
    assert stale <= {"dropout1d", "binomial"}, stale   # newer torch than 1.13


def marked(source):
    tree, _ = instrument.instrument(ast.parse(source))
    return sorted(n.value.args[0].value for n in ast.walk(tree)
                  if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
                  and getattr(n.value.func, "id", None) == instrument.ITERATION_NAME)


def test_loops_that_draw_are_marked_by_name_generator_keyword_or_through_the_modules_functions():
    source = """
import random
for i in range(3):
    x = random.random()
for i in range(3):
    y = rng.standard_normal(2)
for i in range(3):
    z = torch.empty(3).normal_()
for i in range(3):
    w = sample_from(weights, generator=g)
def noise():
    return random.gauss(0, 1)
def step():
    return noise() * 2
for i in range(3):
    v = step()
for i in range(3):
    u = len(str(i))
while n < 3:
    n += shuffle_order(n)
"""
    assert marked(source) == [3, 5, 7, 9, 15]


def test_from_numpy_random_import_notes_numpys_global_generator():
    source = "from numpy.random import rand\nfor i in range(3):\n    x = rand()\n"
    tree, _ = instrument.instrument(ast.parse(source))
    loop = next(n for n in tree.body if isinstance(n, ast.For))
    assert [a.value for a in loop.body[0].body[0].value.args[:2]] == [2, True]


def test_a_loop_that_hands_a_training_function_to_a_call_is_marked():
    # the LBFGS pattern: the closure calls backward(), optimizer.step calls the closure
    source = """
for i in range(3):
    def closure():
        return model(x).sum().backward()
    opt.step(closure)
for i in range(3):
    print(sample)
"""
    assert marked(source) == [2]
