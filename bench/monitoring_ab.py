#!/usr/bin/env python3
"""Portal's loop instrumentation against sys.monitoring (PEP 669, CPython 3.12+).

    python3.13 bench/monitoring_ab.py [--rounds N] [--package-dir DIR]

Issue 12 asks, where a CPython version gives a cheaper or safer tool, to measure
it against the instrumentation and take the better.  What Portal needs from
either, and what each costs a program that never fails:

  rescue   see an error reach a loop of the user's code, with the loop's frame
           still alive.  Instrumentation: an exception-table entry around the
           loop body (no instruction runs until something raises).  Monitoring:
           a RAISE (or PY_UNWIND) callback, called on every raise of the
           program's, including the ones its own try/except handles.
  mark     note the random generators when a training loop's iteration starts.
           Instrumentation: one call of a builtin at the body's start, only in
           loops whose body calls .backward().  Monitoring: a JUMP (or LINE)
           event on that code, a callback every iteration.

In ONE process each workload is compiled plain, instrumented
(_portal.run.instrument.compile_user_source, as portal-run does) and plain with the
monitoring events that would replace it, and the work() functions are timed
alternately (order rotated every round): ratios against plain, medians and the
median of per-round ratios.  The callbacks do the least they could (return
None, or count), so monitoring's figures are a floor.

Exit status: 0; 2 on an interpreter without sys.monitoring (3.11: nothing to
compare).  See docs/benchmarks.md ("Decisions the figures made").
"""
import argparse
import builtins
import os
import statistics
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.path.join(BENCH_DIR, "workloads")

# A loop whose body never calls anything: what a tight loop pays.
TIGHT = '''
def work():
    total = 0
    k = 0
    for i in range(2_000_000):
        k = k // 2 if k % 2 == 0 else 3 * k + 1
        total += k & 7
    return total
'''

# A loop whose body raises and handles an error of its own each iteration (a
# parser's try/except, a dict miss caught as KeyError): monitoring's RAISE
# callback runs for each; an exception-table entry only when the error leaves the
# body.
HANDLED = '''
def work():
    table = {i: i for i in range(0, 400_000, 2)}
    hits = 0
    for i in range(400_000):
        try:
            hits += table[i]
        except KeyError:
            hits -= 1
    return hits
'''

# A training-loop shape: the body calls .backward() (so Portal marks each
# iteration), on a stand-in object so the bench needs no torch.
MARKED = '''
class Loss:
    def __init__(self, v):
        self.v = v
    def backward(self):
        return self.v * 2

def work():
    total = 0
    for step in range(300_000):
        loss = Loss(step)
        total += loss.backward()
    return total
'''

TOOL = 3   # a tool id of the 6; 0-2 and 5 are named (debugger, coverage, profiler, optimizer)


def compile_variants(src, name, instrument):
    out = {}
    for variant, code in (("plain", compile(src, name, "exec", dont_inherit=True)),
                          ("instrumented", instrument.compile_user_source(src, name))):
        ns = {"__name__": "bench"}
        exec(code, ns)
        out[variant] = ns["work"]
    return out


class Monitoring:
    """A sys.monitoring tool with the events that would replace instrumentation:
    RAISE globally (rescue), JUMP on one code object (mark)."""

    def __init__(self, events, code=None):
        self.events, self.code, self.calls = events, code, 0

    def __enter__(self):
        mon = sys.monitoring
        mon.use_tool_id(TOOL, "portal-bench")

        def callback(*args):
            self.calls += 1
        for event in self.events:
            mon.register_callback(TOOL, event, callback)
        mask = 0
        for event in self.events:
            mask |= event
        if self.code is None:
            mon.set_events(TOOL, mask)
        else:
            mon.set_local_events(TOOL, self.code, mask)
        return self

    def __exit__(self, *exc):
        mon = sys.monitoring
        if self.code is None:
            mon.set_events(TOOL, 0)
        else:
            mon.set_local_events(TOOL, self.code, 0)
        for event in self.events:
            mon.register_callback(TOOL, event, None)
        mon.free_tool_id(TOOL)


def timed(work, monitoring=None):
    if monitoring is None:
        t0 = time.perf_counter()
        result = work()
        return time.perf_counter() - t0, result
    with monitoring:
        t0 = time.perf_counter()
        result = work()
        return time.perf_counter() - t0, result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--package-dir", default=os.path.join(BENCH_DIR, os.pardir, "python"))
    args = ap.parse_args()
    if not hasattr(sys, "monitoring"):
        sys.stderr.write(f"monitoring_ab.py: CPython {sys.version.split()[0]} has no "
                         f"sys.monitoring (3.12+); nothing to compare\n")
        return 2
    sys.path.insert(0, os.path.abspath(args.package_dir))
    from _portal.run import instrument  # noqa: E402
    builtins.__portal_rescue__ = lambda *a: None      # called only when a body raises
    builtins.__portal_iteration__ = lambda *a: None   # the mark's call, at its cheapest
    ev = sys.monitoring.events
    print(f"python {sys.version.split()[0]}; {args.rounds} rounds; times are medians (ms); "
          f"ratios to plain: of the medians, and the median of the per-round ratios")
    # (label, source, what Portal needs there, events replacing it, local?, iterations)
    cases = [("tight loop", TIGHT, "rescue", (ev.RAISE,), False, 2_000_000),
             ("handled raise", HANDLED, "rescue", (ev.RAISE,), False, 400_000),
             ("marked loop", MARKED, "mark", (ev.JUMP,), True, 300_000)]
    print("ns/it: what the variant adds to one iteration (median time over plain's, per iteration)")
    print(f"{'workload':<14} {'needs':<7} {'plain':>8} {'instr.':>8} {'ratio':>6} {'paired':>6}"
          f" {'ns/it':>6} {'monitor':>8} {'ratio':>6} {'paired':>6} {'ns/it':>6}  monitoring events")
    for label, src, need, events, local, iterations in cases:
        work = compile_variants(src, label, instrument)
        runs = {"plain": (work["plain"], None), "instrumented": (work["instrumented"], None),
                "monitoring": (work["plain"], lambda: Monitoring(
                    events, work["plain"].__code__ if local else None))}
        times = {k: [] for k in runs}
        results = set()
        names = list(runs)
        for name in names:   # warm-up (specialisation, caches)
            fn, mon = runs[name]
            results.add(timed(fn, mon() if mon else None)[1])
        for i in range(args.rounds):
            order = names[i % 3:] + names[:i % 3]
            for name in order:
                fn, mon = runs[name]
                dt, result = timed(fn, mon() if mon else None)
                times[name].append(dt)
                results.add(result)
        if len(results) != 1:
            sys.stderr.write(f"monitoring_ab.py: {label}: the variants computed different results\n")
            return 2
        med = {k: statistics.median(v) for k, v in times.items()}
        paired = {k: statistics.median(b / a for a, b in zip(times["plain"], v))
                  for k, v in times.items()}
        per_it = {k: (med[k] - med["plain"]) / iterations * 1e9 for k in med}
        print(f"{label:<14} {need:<7} {med['plain'] * 1e3:>8.1f} {med['instrumented'] * 1e3:>8.1f} "
              f"{med['instrumented'] / med['plain']:>6.3f} {paired['instrumented']:>6.3f} "
              f"{per_it['instrumented']:>6.0f} "
              f"{med['monitoring'] * 1e3:>8.1f} {med['monitoring'] / med['plain']:>6.3f} "
              f"{paired['monitoring']:>6.3f} {per_it['monitoring']:>6.0f}  "
              f"{'+'.join(e for e in ('RAISE', 'JUMP') if getattr(ev, e) in events)}"
              f"{' (on work only)' if local else ' (global)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
