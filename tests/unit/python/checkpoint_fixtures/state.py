"""The state each checkpoint fixture holds (vN/, written by make_fixture.py)."""
import numpy as np
import torch


def expected_state():
    rng = np.random.default_rng(7)
    rng.standard_normal(5)                  # drawn: the saved state is not a fresh one
    return {"ints": np.arange(3000, dtype=np.int64).reshape(30, 100),
            "view": np.arange(100, dtype=np.float64)[::3],
            "floats": torch.linspace(0, 1, 4097, dtype=torch.float32),
            "halves": torch.arange(64, dtype=torch.float16).view(8, 8).t(),
            "param": torch.nn.Parameter(torch.ones(4, 4)),
            "nested": {"list": [1, 2.5, "three", (4, b"five")], "none": None},
            "numpy_gen": rng}
