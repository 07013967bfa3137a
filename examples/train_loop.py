"""A small training loop: a linear model fitted by gradient descent with numpy.

Runs the same under `python3` and `portal-run`; it is the script the README's
main command runs.
"""
import argparse

import numpy as np


def make_data(rng, n=256, dim=8):
    true_w = rng.normal(size=dim)
    x = rng.normal(size=(n, dim))
    y = x @ true_w + 0.01 * rng.normal(size=n)
    return x, y


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    x, y = make_data(rng)
    w = np.zeros(x.shape[1])
    for step in range(args.steps):
        grad = 2 * x.T @ (x @ w - y) / len(y)
        w -= args.lr * grad
        loss = float(np.mean((x @ w - y) ** 2))
        print(f"step {step}: loss {loss:.6f}")
    print("final weights:", np.round(w, 4).tolist())


if __name__ == "__main__":
    main()
