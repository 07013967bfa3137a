# Loops without .backward() that draw random numbers, then fail in the same
# iteration (the fake OOM is on the `room = ...` line of each case).  Each case
# prints its numbers to the last bit (repr) after the failing line, so a redraw
# shows.  argv[1] picks the case.
import random
import sys

import numpy as np

CASE = sys.argv[1]
random.seed(11)
rng = np.random.default_rng(3)          # module level
chooser = random.Random(5)


def in_function():
    local_rng = np.random.default_rng(7)
    total = 0.0
    for i in range(6):
        x = local_rng.standard_normal()
        room = [0.0] * 8                   # line 21: in a function, numpy Generator
        total += x
        print(i, repr(x), repr(total))


def gauss_in_function():
    local = random.Random(9)
    for i in range(6):
        a = random.random()
        x = local.gauss(0.0, 1.0)
        room = [0.0] * 8                   # line 31: in a function, random and a random.Random
        print(i, repr(a), repr(x))


def torch_cases(kind):
    import torch
    torch.manual_seed(0)
    gen = torch.Generator()
    gen.manual_seed(123)
    weights = torch.tensor([0.1, 0.2, 0.3, 0.4])
    for i in range(6):
        if kind == "randn":
            x = torch.randn(3)
        else:
            x = torch.multinomial(weights, 2, generator=gen)
        room = [0.0] * 8                   # line 46: torch
        print(i, x.tolist())


if CASE == "random":
    for i in range(6):
        x = random.random()
        room = [0.0] * 8                   # line 53: random's global generator
        print(i, repr(x))
elif CASE == "gauss":
    for i in range(6):
        x = chooser.gauss(0.0, 1.0)
        room = [0.0] * 8                   # line 58: a random.Random object
        print(i, repr(x))
elif CASE == "numpy":
    for i in range(6):
        x = rng.standard_normal(2)
        room = [0.0] * 8                   # line 63: a module-level numpy Generator
        print(i, repr(x.tolist()))
elif CASE == "function":
    in_function()
elif CASE == "gauss_function":
    gauss_in_function()
elif CASE in ("randn", "multinomial"):
    torch_cases(CASE)
