"""A sweep that parses each trial's settings with the script's own
ArgumentParser into a dataclass, and trains a small numpy model with them."""
# corpus-names: parser, SUPPRESS, results
import argparse
import dataclasses

import numpy as np

import corpus


@dataclasses.dataclass
class Config:
    lr: float
    steps: int
    seed: int = 0
    verbose: bool = False


parser = argparse.ArgumentParser(description="sweep")
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--name", default=argparse.SUPPRESS)          # absent unless given
parser.add_argument("--verbose", action="store_true", help=argparse.SUPPRESS)


def fit(cfg):
    rng = np.random.default_rng(cfg.seed)
    x = rng.standard_normal((40, 3))
    y = x @ np.array([1.0, -2.0, 0.5])
    w = np.zeros(3)
    for _ in range(cfg.steps):
        w = w - cfg.lr * x.T @ (x @ w - y) / len(x)               # corpus: inside@9=memory
    return float(((x @ w - y) ** 2).mean())


trials = [["--lr", "0.05"], ["--lr", "0.1", "--seed", "1"], ["--lr", "0.2", "--steps", "4"],
          ["--lr", "0.3", "--verbose"], ["--lr", "0.01", "--steps", "9"], ["--seed", "2"]]
results = {}
for argv in trials:
    args = parser.parse_args(argv)
    cfg = Config(**vars(args))                                     # corpus: before@3=memory
    results[" ".join(argv)] = fit(cfg)
    corpus.grow()                                                  # corpus: real@5
    print(cfg, results[" ".join(argv)].hex())                      # corpus: after@4=memory
print(sorted(vars(parser.parse_args([])).items()))
print(parser.format_help())
