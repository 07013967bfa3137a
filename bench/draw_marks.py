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

# One program a loop: a module that mentions np.random has numpy's global
# generator noted too (about 20 us more a mark, iteration.py).
PROGRAMS = {
    "tight random.random() loop": r'''
import random, time
random.seed(0)

def tight(n):
    hits = 0
    for i in range(n):
        x = random.random()
        y = random.random()
        if x * x + y * y < 1.0:
            hits += 1
    return hits
''',
    "numpy Generator, block loop": r'''
import time
import numpy as np
rng = np.random.default_rng(0)

def tight(n):
    total = 0.0
    for i in range(n):
        total += float(rng.standard_normal(100_000).sum())
    return total
''',
}
TIMING = r'''
n = int(__import__("sys").argv[1])
times = []
for _ in range(3):
    t = time.perf_counter(); tight(n); times.append(time.perf_counter() - t)
print(f"{min(times) / n * 1e6:.2f}")
'''
COUNTS = {"tight random.random() loop": 200_000, "numpy Generator, block loop": 300}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--portal-run")
    args = parser.parse_args()
    portal_run, _ = overhead.find_portal_run(args.portal_run)
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(overhead.bench_env(), PORTAL_HOME=os.path.join(tmp, "home"))
        rows = {}
        for name, program in PROGRAMS.items():
            script = os.path.join(tmp, f"draws{len(rows)}.py")
            with open(script, "w") as f:
                f.write(program + TIMING)
            for label, cmd in (("python", [sys.executable]), ("portal-run", [portal_run])):
                out = subprocess.run(cmd + [script, str(COUNTS[name])], env=env, cwd=tmp,
                                     capture_output=True, text=True, check=True).stdout
                rows.setdefault(name, {})[label] = float(out.split()[-1])
    print(f"{'loop':32s} {'python':>10s} {'portal-run':>12s}  (us per iteration, best of 3)")
    for name, row in rows.items():
        print(f"{name:32s} {row['python']:10.2f} {row['portal-run']:12.2f}")


if __name__ == "__main__":
    main()
