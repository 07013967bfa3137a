#!/usr/bin/python3
"""The real out-of-memory matrix under load: every case of
tests/e2e/real_oom_cases.py (the cases e2e.real_oom runs once) run REPEATS times
while two CPU-bound processes load the machine; counts the jobs lost (not
suspended, or a resume that did not finish with python's output).

    /usr/bin/python3 bench/real_oom_stress.py [--repeats 5] [--load 2] [--only NAME]
                                              [--portal-run PATH]

portal-run is build/bin/portal-run unless --portal-run or PORTAL_RUN names one;
`portal` is taken beside it.  Run as root for the cgroup cases (they are skipped,
and said so, where no memory cgroup can be made).  Prints one line per run and a
table: case, runs, rescued, lost, other failures.  Exit status 0 when nothing was
lost or failed, 1 otherwise.
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
import real_oom_cases as matrix  # noqa: E402


def load(n):
    """n CPU-bound processes (a busy loop each), in their own process group."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
            for _ in range(n)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--load", type=int, default=2, help="CPU-bound processes beside (default 2)")
    parser.add_argument("--only", help="run only the cases whose name contains this")
    parser.add_argument("--portal-run", default=os.environ.get("PORTAL_RUN") or str(ROOT / "build/bin/portal-run"))
    args = parser.parse_args()
    portal_run = os.path.abspath(args.portal_run)
    portal_cli = os.path.join(os.path.dirname(portal_run), "portal")
    cases = [c for c in matrix.CASES if not args.only or args.only in c.name]
    no_cgroup = matrix.cgroup_unavailable()
    counts = {}
    # Stopped by Ctrl-C or kill (a background job starts with SIGINT ignored):
    # the load processes go with it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda signo, frame: sys.exit(128 + signo))
    busy = load(args.load)
    try:
        with tempfile.TemporaryDirectory(prefix="real-oom-stress-") as tmp:
            for case in cases:
                row = counts.setdefault(case.name, [0, 0, 0, 0])
                if case.needs() and not matrix.importable(case.needs()):
                    print(f"{case.name}: skipped: {case.needs()} is not installed", flush=True)
                    continue
                if case.mem is None and no_cgroup:
                    print(f"{case.name}: skipped: {no_cgroup}", flush=True)
                    continue
                expected = matrix.python_output(case, Path(tmp) / case.name / "python", timeout=600)
                for i in range(args.repeats):
                    work = Path(tmp) / case.name / str(i)
                    started = time.monotonic()
                    outcome = matrix.run_case(case, expected, portal_run, portal_cli, work, timeout=600)
                    row[0] += 1
                    if outcome.ok:
                        row[1] += 1
                    elif outcome.lost:
                        row[2] += 1
                    else:
                        row[3] += 1
                    state = "rescued" if outcome.ok else "LOST" if outcome.lost else "FAILED"
                    print(f"{case.name} run {i + 1}: {state} in {time.monotonic() - started:.0f} s", flush=True)
                    if not outcome.ok:
                        print("  " + outcome.why.replace("\n", "\n  "), flush=True)
                    subprocess.run(["rm", "-rf", str(work)])
    finally:
        for p in busy:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    print(f"\n{'case':32} {'runs':>5} {'rescued':>8} {'lost':>5} {'failed':>7}")
    for name, (runs, ok, lost, failed) in counts.items():
        print(f"{name:32} {runs:5} {ok:8} {lost:5} {failed:7}")
    total = [sum(r[i] for r in counts.values()) for i in range(4)]
    print(f"{'all':32} {total[0]:5} {total[1]:8} {total[2]:5} {total[3]:7}")
    return 0 if total[2] == 0 and total[3] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
