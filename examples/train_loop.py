"""A small training loop whose memory grows: a linear model fitted by gradient
descent with numpy, where each step also needs a workspace twice the size of the
last (as when a curriculum doubles the sequence length each step), filled before
use.

Runs the same under `python3` and `portal-run`.  It is the script the README's
main command runs under `portal-run --mem 2G`, where step 8's 2 GiB workspace no
longer fits: the job is suspended at that step's start, and
`portal resume JOB --mem 4` finishes it.
"""
import argparse

import numpy as np

MiB = 1 << 20


def make_data(rng, n=256, dim=8):
    true_w = rng.normal(size=dim)
    x = rng.normal(size=(n, dim))
    y = x @ true_w + 0.01 * rng.normal(size=n)
    return x, y


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--workspace-mib", type=int, default=16,
                        help="the first step's workspace; each step's is twice the last")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    x, y = make_data(rng)
    w = np.zeros(x.shape[1])
    for step in range(1, args.steps + 1):
        size_mib = args.workspace_mib << (step - 1)
        # Written through: the memory is really used.
        workspace = np.full(size_mib * MiB // 4, step, dtype=np.float32)
        noise = float(workspace[::MiB].mean()) * 1e-4
        del workspace
        grad = 2 * x.T @ (x @ w - y) / len(y) + noise
        w -= args.lr * grad
        loss = float(np.mean((x @ w - y) ** 2))
        print(f"step {step}: workspace {size_mib} MiB, loss {loss:.6f}")
    print("final weights:", np.round(w, 4).tolist())


if __name__ == "__main__":
    main()
