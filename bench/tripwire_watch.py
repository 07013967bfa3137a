#!/usr/bin/python3
"""The memory tripwire's watcher (src/launcher/memory_watch.cpp, the resident cap:
PORTAL_MEMORY_TRIPWIRE=resident): what it costs and what its poll interval changes.

    /usr/bin/python3 bench/tripwire_watch.py [--portal-run PATH] [--polls 1,5,20,50]
                                             [--seconds 10] [--repeats 2]

1. Its CPU cost: the supervisor's threads' time on CPU (the sum of
   /proc/PID/task/*/schedstat, nanoseconds) while the program sleeps --seconds,
   for each poll interval, against a run with the tripwire off
   (PORTAL_MEMORY_TRIPWIRE=0) in the same run, interleaved; the program's own
   process is not the supervisor's and is not counted.  Under --mem 2G (the
   high water 1.3 GiB away: a look every 20 ms or the poll interval if longer)
   and under the machine's own cap (no --mem: far below it, a look every few
   hundred milliseconds; memory_watch.hpp's next_look()).
2. What the interval changes: for each interval, how tests/e2e/tripwire's
   grow_numpy.py (--mem 1G: memory grown by 128 MiB allocations, case b) and
   one_write.py (--mem 512M: one 384 MiB array written at once, case c) end: the
   allocation refused (MemoryError, the iteration runs again), suspended at the
   next safe point (reason memory), or not stopped; the round they stopped in;
   and the program's peak resident memory (ru_maxrss of portal-run's waited
   children) against the cap.
Each run touches at most about 1 GiB of memory.
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead import PYTHON, find_portal_run  # noqa: E402

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests", "e2e", "tripwire")
MiB = 1 << 20
CAPS = {"1G": 1024 * MiB - 256 * MiB, "512M": 512 * MiB - 256 * MiB}   # cap_for(): the 256 MiB reserve
# How long before the program's end the supervisor's CPU time is read.
READ_BEFORE_END = 0.5


def cpu_ns(pid):
    total = 0
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(path) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def supervisor_cpu(portal_run, seconds, env, mem):
    limit = ["--mem", mem] if mem else []
    proc = subprocess.Popen([portal_run, *limit, "-c", f"import time; time.sleep({seconds})"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(seconds - READ_BEFORE_END)
    ns = cpu_ns(proc.pid)
    proc.wait()
    return ns


def outcome(portal_run, script, mem, env, home):
    """How the run ended, the last round it printed, and its peak resident memory
    (ru_maxrss of portal-run, which includes the children it waited for)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([portal_run, "--mem", mem, *script], cwd=home, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        out, err = out.read(), err.read()
    rounds = re.findall(rb"^round (\d+)", out, re.M)
    last = int(rounds[-1]) if rounds else 0
    first = err.split(b"\n", 1)[0].decode(errors="replace")
    if "MemoryError" in first or "can't allocate" in first:
        how = "allocation refused"
    elif "passed the memory tripwire's cap" in first:
        how = "safe point"
    elif proc.returncode == 0:
        how = "not stopped"
    else:
        how = f"exit {proc.returncode}"
    return how, last, usage.ru_maxrss * 1024


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--portal-run")
    parser.add_argument("--polls", default="1,5,20,50")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    portal_run, origin = find_portal_run(args.portal_run)
    polls = [int(p) for p in args.polls.split(",")]
    print(f"portal-run: {portal_run} ({origin}); python: {PYTHON}; {os.cpu_count()} CPUs")
    home = tempfile.mkdtemp(prefix="tripwire-watch-")
    try:
        for name in ("grow_numpy.py", "one_write.py"):
            shutil.copy(os.path.join(CORPUS, name), home)
        base = dict(os.environ, PORTAL_HOME=os.path.join(home, "store"), PYTHONDONTWRITEBYTECODE="1",
                    PORTAL_MEMORY_TRIPWIRE="resident")
        off = dict(base, PORTAL_MEMORY_TRIPWIRE="0")

        print(f"\n1. supervisor CPU while the program sleeps {args.seconds:g} s "
              f"(median of {args.repeats}, interleaved)")
        results = {"off": []}
        mems = ("2G", None)
        for _ in range(args.repeats):
            results["off"].append(supervisor_cpu(portal_run, args.seconds, off, None))
            for mem in mems:
                for p in polls:
                    results.setdefault((mem, p), []).append(supervisor_cpu(
                        portal_run, args.seconds, dict(base, PORTAL_TRIPWIRE_POLL_MS=str(p)), mem))
        median = {k: sorted(v)[len(v) // 2] for k, v in results.items()}
        watched = args.seconds - READ_BEFORE_END
        print(f"  {'cap':>14}  {'poll':>8}  {'CPU ms':>8}  {'over off':>9}  {'per second':>11}  "
              f"{'% of a core':>11}")
        print(f"  {'off':>14}  {'':>8}  {median['off'] / 1e6:8.2f}")
        for mem in mems:
            for p in polls:
                extra = max(0, median[mem, p] - median["off"])
                print(f"  {'--mem ' + mem if mem else 'the machine':>14}  {p:>6}ms  "
                      f"{median[mem, p] / 1e6:8.2f}  {extra / 1e6:8.2f}  "
                      f"{extra / 1e6 / watched:8.3f} ms  {100 * extra / 1e9 / watched:10.3f}%")

        print("\n2. how the program is stopped, by poll interval (cap: --mem less the 256 MiB reserve)")
        print(f"  {'poll':>8}  {'case':<34}  {'stopped by':<19}  {'round':>5}  {'peak RSS':>9}  {'cap':>9}")
        for p in polls:
            env = dict(base, PORTAL_TRIPWIRE_POLL_MS=str(p))
            for script, mem, case in ((["grow_numpy.py", "128", "6", "write"], "1G",
                                       "(b) 128 MiB allocations, --mem 1G"),
                                      (["one_write.py", "384"], "512M", "(c) 384 MiB written at once, --mem 512M")):
                how, last, peak = outcome(portal_run, script, mem, env, home)
                print(f"  {p:>6}ms  {case:<34}  {how:<19}  {last:>5}  {peak / MiB:6.0f} MiB  "
                      f"{CAPS[mem] / MiB:5.0f} MiB")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
