"""Shared by the workloads: time a piece of work inside the process and report it.

Each workload times its work with time.perf_counter() (so process start-up,
imports and interpreter finalisation are excluded) and prints one line

    PORTAL_BENCH {"workload": ..., "times": [seconds, ...], "check": ...}

on stdout.  "times" holds one entry per inner repetition (after an untimed
warm-up); "check" is a value derived from the computation so that the harness
can verify both runners did exactly the same work.
"""
import json
import os
import sys
import time


def scale():
    """Work size multiplier: the harness passes --scale S (default 1.0)."""
    if "--scale" in sys.argv:
        return float(sys.argv[sys.argv.index("--scale") + 1])
    return 1.0


def reps():
    if "--reps" in sys.argv:
        return int(sys.argv[sys.argv.index("--reps") + 1])
    return 3


def measure(name, work, warmup=True):
    """Run work() once untimed (warm-up), then reps() timed repetitions."""
    if warmup:
        work()
    times = []
    check = None
    for _ in range(reps()):
        t0 = time.perf_counter()
        check = work()
        times.append(time.perf_counter() - t0)
    line = json.dumps({"workload": name, "times": times, "check": check,
                       "pid": os.getpid()})
    sys.stdout.write("PORTAL_BENCH " + line + "\n")
    sys.stdout.flush()
