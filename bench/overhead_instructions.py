#!/usr/bin/python3
"""Steady-state overhead of portal-run in instructions, immune to a noisy machine.

    /usr/bin/python3 bench/overhead_instructions.py [--portal-run PATH] [--scale X]
                                                     [--only NAME] [--check]

overhead.py times the workloads; on a shared or noisy host a single run's medians
can swing by 5-15% (docs/benchmarks.md).  This counts instead: each steady-state
workload of overhead.py (calls, loops, torch) runs under valgrind's cachegrind
(`--cache-sim=no`: instruction counts only, every process of the tree) with 1 and
with 3 timed repetitions, under python and under portal-run.  The difference
between the two counts of one runner is what two calls of the workload's work()
cost in that runner - start-up, imports, Portal's bootstrap and the
interpreter's exit cancel out (after one uncounted run of each, so that caches
written by a first run do not fall on one count only) - and the table gives its ratio, portal-run over
python, against overhead.py's steady-state target (<= 1.02).

Instructions are not time (a cache miss costs more than an add), but Portal's
steady-state cost is instructions it adds to the loop (a mark, a patched call),
so a ratio above the target here is a real cost, and one within it on a machine
where overhead.py's timings are noisy confirms that overhead.py's miss was the
host's.  Slow: about 4 minutes for the torch workload at --scale 0.2 (the
default).  Needs valgrind (`apt install valgrind`); says so and exits 2 without it.

Exit status: 0; with --check, 1 if a ratio misses the target; 2 if something
crashed or the runners computed different results.
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)
import overhead  # noqa: E402  (the workloads, the environment, finding portal-run)

REPS = (1, 3)            # timed repetitions of the two runs of each runner
DEFAULT_SCALE = 0.2      # work size: cachegrind runs ~50x slower than the CPU


def count_instructions(argv, env, workdir, tag):
    """Run argv under cachegrind; (instructions of every process of the tree, the
    workload's PORTAL_BENCH record)."""
    out = os.path.join(workdir, tag + ".%p")
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--trace-children=yes",
           "--cachegrind-out-file=" + out] + argv
    proc = subprocess.run(cmd, env=env, cwd=overhead.BENCH_DIR, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise overhead.Crash(f"{' '.join(argv)} under valgrind exited with "
                             f"{proc.returncode}:\n{proc.stderr[-4000:]}")
    total = 0
    for path in glob.glob(os.path.join(workdir, tag + ".*")):
        with open(path) as f:
            for line in f:
                if line.startswith("summary:"):
                    total += int(line.split()[1])
        os.unlink(path)
    return total, overhead.parse_bench_line(proc.stdout, argv)


def measure(name, script, portal_run, env, scale, workdir):
    """{runner: instructions of one work() call}, checking both computed the same."""
    per_call, checks = {}, set()
    path = os.path.join(overhead.WORKLOADS, script)
    for label, prefix in overhead.runners(portal_run):
        # One uncounted run first: a runner's first start in a fresh PORTAL_HOME also
        # probes the interpreter and instruments and caches the script (~150 million
        # instructions), which would otherwise fall on the first counted run only and
        # not cancel out (bytecode caches alike for python).
        overhead.run_process(prefix + [path, "--reps", "1", "--scale", str(scale)], env,
                             capture=True)
        counts = []
        for reps in REPS:
            argv = prefix + [path, "--reps", str(reps), "--scale", str(scale)]
            overhead.progress(f"  {name}: {label}, {reps} rep(s) ...\n")
            total, record = count_instructions(argv, env, workdir, f"{name}-{label}-{reps}")
            counts.append(total)
            checks.add(json.dumps(record.get("check"), sort_keys=True))
        per_call[label] = (counts[1] - counts[0]) / (REPS[1] - REPS[0])
    if len(checks) != 1:
        raise overhead.Crash(f"{name}: the runners computed different results: {sorted(checks)}")
    return per_call


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--portal-run")
    ap.add_argument("--scale", type=float, default=DEFAULT_SCALE)
    ap.add_argument("--only", action="append", choices=[n for n, _, _ in overhead.STEADY])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        sys.stderr.write("overhead_instructions.py: valgrind is not installed "
                         "(apt install valgrind); overhead.py times the same workloads\n")
        return 2
    portal_run, origin = overhead.find_portal_run(args.portal_run)
    print(f"python:     {overhead.PYTHON}")
    print(f"portal-run: {portal_run} (from {origin})")
    print(f"checkout:   {overhead.checkout_description()}")
    print(f"settings:   scale {args.scale}; work() calls counted: {REPS[1] - REPS[0]} "
          f"(runs with {REPS[0]} and {REPS[1]} timed repetitions)")
    env = overhead.bench_env()
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="portal-instr-") as workdir:
            env["PORTAL_HOME"] = os.path.join(workdir, "home")
            for name, script, desc in overhead.STEADY:
                if args.only and name not in args.only:
                    continue
                per_call = measure(name, script, portal_run, env, args.scale, workdir)
                rows.append((name, desc, per_call["python"], per_call["portal-run"]))
    except overhead.Crash as e:
        sys.stderr.write(f"overhead_instructions.py: {e}\n")
        return 2
    print()
    print(f"{'workload':40s} {'python':>14s} {'portal-run':>14s} {'ratio':>7s} "
          f"{'target':>8s}  result")
    print("-" * 95)
    missed = []
    for name, desc, py, pr in rows:
        ratio = pr / py
        ok = ratio <= overhead.STEADY_TARGET_RATIO
        if not ok:
            missed.append(name)
        print(f"{name + ' (' + desc + ')':40s} {py:14,.0f} {pr:14,.0f} {ratio:7.3f} "
              f"{'<= ' + str(overhead.STEADY_TARGET_RATIO):>8s}  {'PASS' if ok else 'FAIL'}")
    print("(instructions of one work() call, every process of the tree)")
    print("targets missed: " + (", ".join(missed) if missed else "none"))
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
