#!/usr/bin/python3
"""Cost of Portal's loop instrumentation alone, without process-to-process noise.

    /usr/bin/python3 bench/instrumentation_ab.py [--rounds N] [--package-dir DIR]

In ONE process, each steady-state workload of overhead.py is compiled twice, plain
(compile(), as python does) and instrumented (_portal.run.instrument.
compile_user_source(), as portal-run does for the user's own code), and the two
work() functions are timed alternately (order flipped every round).  The same
process, heap and CPU run both, so a ratio here is the cost of the rewritten
bytecode itself.  Also prints, for a tight `while` loop, the instructions the
instrumented version executes per iteration that the plain one does not.

DIR is the directory holding the `_portal` package (default: ../python next to
this directory, i.e. the checkout's sources).
"""
import argparse
import builtins
import dis
import os
import statistics
import sys
import time
from collections import Counter

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.path.join(BENCH_DIR, "workloads")

TIGHT_WHILE = '''
def collatz(k):
    steps = 0
    while k != 1:
        k = k // 2 if k % 2 == 0 else 3 * k + 1
        steps += 1
    return steps
'''


def loop_instructions(code):
    """Opnames of the function's body between the loop start and its backward jump."""
    func = next(c for c in code.co_consts if hasattr(c, "co_code"))
    ins = list(dis.get_instructions(func))
    back = next(i for i in ins if i.opname.startswith("POP_JUMP_BACKWARD"))
    start = next(i for i in ins if i.offset == back.argval)
    path, i = [], ins.index(start)
    # Follow the path of an even k: through the body, over jumps, to the back edge.
    while True:
        cur = ins[i]
        path.append(cur.opname)
        if cur is back:
            return path
        if cur.opname in ("JUMP_FORWARD",):
            i = next(j for j, x in enumerate(ins) if x.offset == cur.argval)
        else:
            i += 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--package-dir", default=os.path.join(BENCH_DIR, os.pardir, "python"))
    args = ap.parse_args()
    sys.path.insert(0, os.path.abspath(args.package_dir))
    sys.path.insert(0, WORKLOADS)
    from _portal.run import instrument  # noqa: E402
    builtins.__portal_rescue__ = lambda *a: None  # only called when a body raises
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.argv[1:] = []  # the workloads read --scale/--reps from sys.argv

    plain = loop_instructions(compile(TIGHT_WHILE, "w.py", "exec"))
    instr = loop_instructions(instrument.compile_user_source(TIGHT_WHILE, "w.py"))
    extra = Counter(instr) - Counter(plain)
    print(f"tight while loop, one iteration: plain {len(plain)} instructions, "
          f"instrumented {len(instr)}"
          + (f" (extra: {', '.join(extra.elements())})" if extra else ""))

    print(f"\n{args.rounds} rounds; times are medians; ratios instrumented/plain of the "
          f"medians, of the minima, and the median of the per-round ratios")
    print(f"{'workload':<12} {'plain ms':>9} {'instr. ms':>9} {'medians':>8} "
          f"{'minima':>8} {'paired':>8}")
    for name in ("calls", "loops", "torch_train"):
        with open(os.path.join(WORKLOADS, name + ".py")) as f:
            src = f.read()
        work = {}
        for variant, code in (("plain", compile(src, name, "exec", dont_inherit=True)),
                              ("instr", instrument.compile_user_source(src, name))):
            ns = {"__name__": "bench"}
            exec(code, ns)
            work[variant] = ns["work"]
        times = {"plain": [], "instr": []}
        for variant in times:
            work[variant]()  # warm-up
        for i in range(args.rounds):
            for variant in (("plain", "instr") if i % 2 == 0 else ("instr", "plain")):
                t0 = time.perf_counter()
                work[variant]()
                times[variant].append(time.perf_counter() - t0)
        p, q = times["plain"], times["instr"]
        paired = statistics.median(b / a for a, b in zip(p, q))
        print(f"{name:<12} {statistics.median(p) * 1e3:>9.1f} {statistics.median(q) * 1e3:>9.1f} "
              f"{statistics.median(q) / statistics.median(p):>8.3f} {min(q) / min(p):>8.3f} "
              f"{paired:>8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
