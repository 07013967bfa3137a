#!/usr/bin/python3
"""What the iteration mark costs a loop that draws random numbers (iteration.py,
rng_names.py): such a loop is marked even without .backward(), so that its
generators are rolled back exactly.

    /usr/bin/python3 bench/draw_marks.py [--portal-run PATH]

Runs two loops under python and under portal-run and prints microseconds per
iteration: a tight pure-Python loop drawing two `random.random()` (the worst
case: the mark is most of the iteration), and a numpy loop drawing a block of
100,000 normals (a loop that does some work).  Timings, not instructions: run it
on a quiet machine.
"""
import argparse
import os
import subprocess
import sys
import tempfile

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)
import overhead  # noqa: E402  (finding portal-run)

PROGRAM = r'''
import random, sys, time
import numpy as np
random.seed(0)
rng = np.random.default_rng(0)

def tight(n):
    hits = 0
    for i in range(n):
        x = random.random()
        y = random.random()
        if x * x + y * y < 1.0:
            hits += 1
    return hits

def blocks(n):
    total = 0.0
    for i in range(n):
        total += float(rng.standard_normal(100_000).sum())
    return total

for name, fn, n in (("tight random.random() loop", tight, 200_000), ("numpy block loop", blocks, 300)):
    times = []
    for _ in range(3):
        t = time.perf_counter(); fn(n); times.append(time.perf_counter() - t)
    print(f"{name}\t{min(times) / n * 1e6:.2f}")
'''


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--portal-run")
    args = parser.parse_args()
    portal_run, _ = overhead.find_portal_run(args.portal_run)
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "draws.py")
        with open(script, "w") as f:
            f.write(PROGRAM)
        env = dict(overhead.bench_env(), PORTAL_HOME=os.path.join(tmp, "home"))
        rows = {}
        for label, cmd in (("python", [sys.executable, script]), ("portal-run", [portal_run, script])):
            out = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True, check=True).stdout
            for line in out.splitlines():
                name, us = line.split("\t")
                rows.setdefault(name, {})[label] = float(us)
    print(f"{'loop':32s} {'python':>10s} {'portal-run':>12s}  (us per iteration, best of 3)")
    for name, row in rows.items():
        print(f"{name:32s} {row['python']:10.2f} {row['portal-run']:12.2f}")


if __name__ == "__main__":
    main()
