#!/usr/bin/python3
"""Overhead of portal-run over plain /usr/bin/python3, measured in one run.

    /usr/bin/python3 bench/overhead.py [--quick] [--check] [--portal-run PATH]

Both runners are measured in the same invocation, interleaved (python, portal-run,
then portal-run, python, ...), so that slow drifts of the machine hit both alike.
Reported as medians (and minima) and as ratios / differences to python:

  startup  wall time of a whole hello-world process, timed from outside
           (target: portal-run within +30 ms of python, medians); when the
           caller sets PYTHONDONTWRITEBYTECODE, measured both with it and without;
  calls    call-heavy pure Python (recursion, method calls), timed INSIDE the
           script with time.perf_counter, so process start-up is excluded;
  loops    loop-heavy pure Python (for/while, arithmetic, list and dict ops);
  torch    a tiny MLP trained with Adam on the CPU, one thread, fixed seed
           (targets for the three: median ratio portal-run/python <= 1.02).

A steady-state process reports one time per inner repetition (after an untimed
warm-up); its value is the minimum of those, and the table shows the median and
the minimum of these values over the processes of each runner.  The size of the
environment changes from one pair of processes to the next (the same for both of
a pair), so that both runners are spread over the same memory layouts.

Exit status: 0 (it is a benchmark); with --check, 1 if a target is missed;
2 if something crashed or the two runners computed different results.
See docs/benchmarks.md.
"""
import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.path.join(BENCH_DIR, "workloads")
PYTHON = "/usr/bin/python3"

STARTUP_TARGET_MS = 30.0
STEADY_TARGET_RATIO = 1.02

# (name, script, description)
STEADY = [
    ("calls", "calls.py", "call-heavy pure Python"),
    ("loops", "loops.py", "loop-heavy pure Python"),
    ("torch", "torch_train.py", "torch CPU training, MLP + Adam"),
]

# Settings of a full run (~1.5 min on 2 idle cores) and of --quick (~20-30 s).
# runs: processes per runner for each steady-state workload; the pure-Python ones
# start fast, so they get more (and the medians are steadier); torch's import costs
# ~1.5 s a process.
FULL = dict(startup_runs=30, runs={"calls": 13, "loops": 13, "torch": 9}, reps=3,
            scale=1.0, warmup=3)
QUICK = dict(startup_runs=15, runs={"calls": 4, "loops": 4, "torch": 4}, reps=2,
             scale=0.5, warmup=2)


class Crash(Exception):
    """A run failed or the runners disagree: the figures would be meaningless."""


def find_portal_run(explicit):
    """--portal-run, then $PORTAL_RUN, then the checkout's build tree, then
    portal-run on PATH (an installed copy may be older than the checkout: it is
    measured only where nothing was built here)."""
    tried = []
    candidates = []
    if explicit:
        candidates.append(("--portal-run", explicit))
    else:
        if os.environ.get("PORTAL_RUN"):
            candidates.append(("$PORTAL_RUN", os.environ["PORTAL_RUN"]))
        candidates.append(("build tree",
                           os.path.join(BENCH_DIR, os.pardir, "build", "bin", "portal-run")))
        on_path = shutil.which("portal-run")
        if on_path:
            candidates.append(("PATH", on_path))
    for origin, path in candidates:
        path = os.path.abspath(path)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path, origin
        tried.append(f"{path} ({origin})")
    sys.stderr.write("overhead.py: cannot find portal-run; tried: " + ", ".join(tried)
                     + "\n  build it (cmake ... && make) or pass --portal-run PATH\n")
    sys.exit(2)


def bench_env():
    env = dict(os.environ)
    # One thread everywhere: two cores, and thread pools only add noise.
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
        env[var] = "1"
    # Same string hashes (dict layouts) in every process of both runners.
    env["PYTHONHASHSEED"] = "0"
    # portal-run runs the interpreter compared against, not PATH's python3 (docs/interpreters.md).
    env.setdefault("PORTAL_PYTHON", PYTHON)
    return env


def run_process(argv, env, capture):
    """Run argv to completion; (wall seconds, cpu seconds of the process tree, result)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=BENCH_DIR, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # portal-run waits for its interpreter, so its rusage includes that process.
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise Crash(f"{' '.join(argv)} exited with {proc.returncode}:\n{proc.stderr}")
    return wall, cpu, proc


def runners(portal_run):
    """The two ways to run a script: [(label, argv prefix)]."""
    return [("python", [PYTHON]), ("portal-run", [portal_run])]


def interleaved(n, pair):
    """Yield (index, [runner, runner]) with the order alternating each repetition."""
    for i in range(n):
        yield i, (pair if i % 2 == 0 else pair[::-1])


def progress(msg):
    sys.stderr.write(msg)
    sys.stderr.flush()


def sanity(pair, env):
    """Both runners print the same thing for the hello-world script."""
    script = os.path.join(WORKLOADS, "hello.py")
    outputs = {label: run_process(prefix + [script], env, True)[2].stdout
               for label, prefix in pair}
    if len(set(outputs.values())) != 1:
        raise Crash(f"hello.py printed different things: {outputs!r}")


def startup_cases(env):
    """[(label, env)]: the caller's environment; and, when it forbids writing
    bytecode caches (PYTHONDONTWRITEBYTECODE, as some CI sandboxes set), also the
    same without it, the usual configuration: portal-run caches the instrumented
    code of the script, which python has no counterpart for."""
    cases = [("startup (hello world, wall)", env)]
    if env.get("PYTHONDONTWRITEBYTECODE"):
        cases[0] = ("startup, PYTHONDONTWRITEBYTECODE=1", env)
        cases.append(("startup, bytecode caches written",
                      {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}))
    return cases


def measure_startup(pair, env, runs, warmup, label):
    """Whole-process wall time of hello.py, run from a fresh directory of its own
    so that no cache left by an earlier run (a __pycache__ next to the script)
    changes what is measured; the warm-up runs create the caches that a real
    second start would find."""
    wall = {name: [] for name, _ in pair}
    cpu = {name: [] for name, _ in pair}
    progress(f"{label}: {warmup} warm-up + {runs} runs each ")
    with tempfile.TemporaryDirectory(prefix="portal-bench-") as tmp:
        script = os.path.join(tmp, "hello.py")
        shutil.copyfile(os.path.join(WORKLOADS, "hello.py"), script)
        for _, order in interleaved(warmup, pair):
            for name, prefix in order:
                run_process(prefix + [script], env, False)
        for i, order in interleaved(runs, pair):
            for name, prefix in order:
                w, c, _ = run_process(prefix + [script], env, False)
                wall[name].append(w * 1e3)
                cpu[name].append(c * 1e3)
            if i % 5 == 4:
                progress(".")
    progress("\n")
    return {"label": label, "wall_ms": wall, "cpu_ms": cpu}


def parse_bench_line(stdout, argv):
    for line in stdout.splitlines():
        if line.startswith("PORTAL_BENCH "):
            return json.loads(line[len("PORTAL_BENCH "):])
    raise Crash(f"{' '.join(argv)} printed no PORTAL_BENCH line:\n{stdout}")


def layout_env(env, i, pad):
    """The environment of repetition i: with `pad`, a variable of a length that
    changes from one repetition to the next (the same for both runners of the
    pair).  The size of the environment moves the initial stack, and with it the
    alignment of the interpreter's data; on this kind of machine that alone shifts
    pure-Python timings by several per cent in either direction (see
    docs/benchmarks.md).  Varying it spreads both runners over the same set of
    layouts instead of comparing one arbitrary layout with another."""
    if not pad:
        return env
    return dict(env, PORTAL_BENCH_PAD="x" * ((i * 1237) % 4096))


def measure_steady(pair, env, name, script, runs, reps, scale, pad=True):
    path = os.path.join(WORKLOADS, script)
    values = {label: [] for label, _ in pair}   # per process: min of its inner reps (s)
    cpu_values = {label: [] for label, _ in pair}  # the same in process CPU time (s)
    lost = {label: [] for label, _ in pair}     # per process: share of wall time not on CPU
    switches = {label: [] for label, _ in pair}  # per process: preemptions a second of work
    inner = {label: [] for label, _ in pair}    # every inner repetition (s)
    checks = {label: set() for label, _ in pair}
    hooks = {label: set() for label, _ in pair}
    info = None
    progress(f"{name}: {runs} runs each ")
    for i, order in interleaved(runs, pair):
        env_i = layout_env(env, i, pad)
        for label, prefix in order:
            argv = prefix + [path, "--reps", str(reps), "--scale", str(scale)]
            _, _, proc = run_process(argv, env_i, True)
            result = parse_bench_line(proc.stdout, argv)
            values[label].append(min(result["times"]))
            cpu = result.get("cpu_times") or result["times"]
            cpu_values[label].append(min(cpu))
            lost[label].append(max(0.0, 1.0 - sum(cpu) / sum(result["times"])))
            if "preempted" in result:
                switches[label].append(result["preempted"] / sum(result["times"]))
            inner[label].extend(result["times"])
            checks[label].add(json.dumps(result["check"]))
            hooks[label].add(json.dumps(result.get("hooks"), sort_keys=True))
            info = result.get("info") or info
        progress(".")
    progress("\n")
    all_checks = set().union(*checks.values())
    if len(all_checks) != 1:
        raise Crash(f"{name}: the runners computed different results: {checks!r}")
    return {"seconds": values, "cpu_seconds": cpu_values, "lost_share": lost,
            "preempted_per_s": switches,
            "inner_seconds": inner, "check": all_checks.pop(),
            "info": info, "hooks": {k: [json.loads(h) for h in v] for k, v in hooks.items()}}


def summary(samples):
    return {"median": statistics.median(samples), "min": min(samples),
            "max": max(samples), "n": len(samples)}


def paired_ratios(a, b):
    """Ratios b[i]/a[i] of the processes run next to each other."""
    return [y / x for x, y in zip(a, b)]


def evaluate(results):
    """Rows of the table, each with its verdict."""
    rows = []
    for st in results["startup"]:
        py = summary(st["wall_ms"]["python"])
        pr = summary(st["wall_ms"]["portal-run"])
        diff = pr["median"] - py["median"]
        rows.append({
            "workload": st["label"], "unit": "ms",
            "python": py, "portal-run": pr,
            "diff_ms_median": diff, "diff_ms_min": pr["min"] - py["min"],
            "target": f"<= +{STARTUP_TARGET_MS:g} ms", "pass": diff <= STARTUP_TARGET_MS,
            "cpu_ms_median": {k: statistics.median(v) for k, v in st["cpu_ms"].items()},
        })
    for name, _, desc in STEADY:
        if name not in results["steady"]:
            continue
        r = results["steady"][name]
        py = summary([s * 1e3 for s in r["seconds"]["python"]])
        pr = summary([s * 1e3 for s in r["seconds"]["portal-run"]])
        ratio = pr["median"] / py["median"]
        rows.append({
            "workload": f"{name} ({desc})", "unit": "ms",
            "python": py, "portal-run": pr,
            "ratio_median": ratio, "ratio_min": pr["min"] / py["min"],
            "ratio_paired_median": statistics.median(
                paired_ratios(r["seconds"]["python"], r["seconds"]["portal-run"])),
            "ratio_cpu_median": statistics.median(r["cpu_seconds"]["portal-run"])
            / statistics.median(r["cpu_seconds"]["python"]),
            "lost_share_median": {k: statistics.median(v) for k, v in r["lost_share"].items()},
            "preempted_per_s_median": {k: statistics.median(v)
                                       for k, v in r.get("preempted_per_s", {}).items() if v},
            "target": f"<= {STEADY_TARGET_RATIO:.2f}", "pass": ratio <= STEADY_TARGET_RATIO,
            "busy": max(statistics.median(v) for v in r["lost_share"].values()) > 0.02,
        })
    return rows


def print_table(rows, out=sys.stdout):
    head = (f"{'workload':<38} {'python ms':>17} {'portal-run ms':>17} "
            f"{'ratio / diff':>19} {'target':>11}  result")
    sub = (f"{'':<38} {'median':>8} {'min':>8} {'median':>8} {'min':>8} "
           f"{'median':>9} {'min':>9} {'':>11}")
    out.write(head + "\n" + sub + "\n" + "-" * len(head) + "\n")
    for row in rows:
        py, pr = row["python"], row["portal-run"]
        if "diff_ms_median" in row:
            rel = f"{row['diff_ms_median']:>+7.1f}ms {row['diff_ms_min']:>+7.1f}ms"
        else:
            rel = f"{row['ratio_median']:>9.3f} {row['ratio_min']:>9.3f}"
        out.write(f"{row['workload']:<38} {py['median']:>8.1f} {py['min']:>8.1f} "
                  f"{pr['median']:>8.1f} {pr['min']:>8.1f} {rel:>19} "
                  f"{row['target']:>11}  {'PASS' if row['pass'] else 'FAIL'}"
                  f"{' (busy machine)' if row.get('busy') else ''}\n")
    out.write("\n")
    for row in rows:
        if "cpu_ms_median" in row:
            c = row["cpu_ms_median"]
            out.write(f"{row['workload']}: CPU time (user+sys, whole process tree), median: "
                      f"python {c['python']:.1f} ms, portal-run {c['portal-run']:.1f} ms "
                      f"({c['portal-run'] - c['python']:+.1f} ms)\n")
    paired = [f"{row['workload'].split()[0]} {row['ratio_paired_median']:.3f}"
              for row in rows if "ratio_paired_median" in row]
    if paired:
        out.write("median of paired ratios (each portal-run process / the python process "
                  "run next to it): " + ", ".join(paired) + "\n")
        cpu = [f"{row['workload'].split()[0]} {row['ratio_cpu_median']:.3f}"
               for row in rows if "ratio_cpu_median" in row]
        out.write("ratio of medians of in-script CPU time (time.process_time): "
                  + ", ".join(cpu) + "\n")
        lost = [f"{row['workload'].split()[0]} "
                + "/".join(f"{100 * v:.1f}%" for v in row["lost_share_median"].values())
                for row in rows if "lost_share_median" in row]
        out.write("share of in-script wall time off the CPU (preempted; python/portal-run, "
                  "median; >1% means a busy machine): " + ", ".join(lost) + "\n")
        switched = [f"{row['workload'].split()[0]} "
                    + "/".join(f"{v:.0f}" for v in row["preempted_per_s_median"].values())
                    for row in rows if len(row.get("preempted_per_s_median", {})) == 2]
        if switched:
            out.write("involuntary context switches of the program's process a second of "
                      "timed work (python/portal-run, median): " + ", ".join(switched) + "\n")


def print_hooks(results, out=sys.stdout):
    """Whether any process ran with a frame-evaluation, trace or profile function."""
    seen = {}
    for r in results["steady"].values():
        for label, states in r["hooks"].items():
            seen.setdefault(label, []).extend(states)
    parts = []
    for label, states in seen.items():
        odd = [h for h in states if h is None or h["trace"] != "None"
               or h["profile"] != "None" or h["eval_frame_default"] is not True]
        parts.append(f"{label}: " + ("none (default frame evaluation, no trace/profile "
                                     "function)" if not odd else f"FOUND {odd[0]!r}"))
    if parts:
        out.write("hooks after the timed work: " + "; ".join(parts) + "\n")


def checkout_description():
    """The commit of the checkout holding this script, and whether the product's
    sources differ from it (portal-run may of course be built from elsewhere)."""
    try:
        head = subprocess.run(["git", "-C", BENCH_DIR, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", BENCH_DIR, "status", "--porcelain", "--",
                                "../src", "../python", "../include"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + (" (uncommitted changes under src/, python/ or include/)"
                                  if dirty.stdout.strip() else "")


def machine_description():
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{platform.node()}, {cpu}, {os.cpu_count()} cores, Linux {platform.release()}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--portal-run", metavar="PATH",
                    help="portal-run to measure (default: $PORTAL_RUN, then "
                         "../build/bin/portal-run next to this directory, then portal-run on PATH)")
    ap.add_argument("--quick", action="store_true", help="a ~30 s run (fewer, shorter runs)")
    ap.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    ap.add_argument("--runs", type=int, help="processes per runner per steady-state workload")
    ap.add_argument("--startup-runs", type=int, help="hello-world processes per runner")
    ap.add_argument("--reps", type=int, help="timed repetitions inside each process")
    ap.add_argument("--scale", type=float, help="work size multiplier of the workloads")
    ap.add_argument("--only", action="append", choices=["startup"] + [s[0] for s in STEADY],
                    help="measure only this (repeatable)")
    ap.add_argument("--json", metavar="FILE", help="also write all samples to FILE")
    ap.add_argument("--no-layout-padding", action="store_true",
                    help="run every steady-state process with the same environment "
                         "(by default its size varies from one pair to the next)")
    args = ap.parse_args(argv)

    cfg = dict(QUICK if args.quick else FULL)
    for key in ("startup_runs", "reps", "scale"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    if args.runs is not None:
        cfg["runs"] = {name: args.runs for name, _, _ in STEADY}
    only = set(args.only or ["startup"] + [s[0] for s in STEADY])

    portal_run, origin = find_portal_run(args.portal_run)
    env = bench_env()
    pair = runners(portal_run)
    started = datetime.datetime.now().astimezone()
    print(f"Portal overhead benchmark, {started:%Y-%m-%d %H:%M %Z}")
    print(f"machine:    {machine_description()}")
    print(f"python:     {PYTHON} ({platform.python_version()})")
    print(f"portal-run: {portal_run} (from {origin})")
    checkout = checkout_description()
    if checkout:
        print(f"checkout:   {checkout}")
    print(f"settings:   {'quick' if args.quick else 'full'}: startup {cfg['startup_runs']} runs "
          f"each; steady " + ", ".join(f"{k} {v}" for k, v in cfg["runs"].items())
          + f" processes each x {cfg['reps']} timed reps, "
          f"scale {cfg['scale']:g}; OMP/MKL threads 1, PYTHONHASHSEED=0"
          + ("" if args.no_layout_padding else "; environment size varied per pair"))
    pyvars = sorted(k for k in env if k.startswith("PYTHON") and k != "PYTHONHASHSEED")
    if pyvars:
        print("environment: " + " ".join(f"{k}={env[k]}" for k in pyvars)
              + " (passed to both runners)")
    sys.stdout.flush()

    results = {"date": started.isoformat(timespec="seconds"), "machine": machine_description(),
               "checkout": checkout,
               "python": PYTHON, "portal_run": portal_run, "settings": cfg, "steady": {}}
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    try:
        sanity(pair, env)
        results["startup"] = []
        if "startup" in only:
            for label, case_env in startup_cases(env):
                results["startup"].append(measure_startup(
                    pair, case_env, cfg["startup_runs"], cfg["warmup"], label))
        for name, script, _ in STEADY:
            if name in only:
                results["steady"][name] = measure_steady(
                    pair, env, name, script, cfg["runs"][name], cfg["reps"], cfg["scale"],
                    not args.no_layout_padding)
    except Crash as exc:
        print(f"overhead.py: CRASH: {exc}", file=sys.stderr)
        return 2
    elapsed = time.perf_counter() - t0
    results["loadavg"] = {"before": load_before, "after": os.getloadavg()}

    rows = evaluate(results)
    print()
    print_table(rows)
    print_hooks(results)
    torch_info = results["steady"].get("torch", {}).get("info")
    if torch_info:
        print(f"torch {torch_info.get('torch')}, {torch_info.get('threads')} thread(s)")
    missed = [row["workload"] for row in rows if not row["pass"]]
    print("load average (1 min) before/after: {:.2f}/{:.2f} on {} cores{}".format(
        load_before[0], results["loadavg"]["after"][0], os.cpu_count(),
        " - other processes were running: figures are noisier" if max(
            load_before[0], results["loadavg"]["after"][0]) > os.cpu_count()
        else ""))
    print(f"total time {elapsed:.0f} s; "
          + (f"targets missed: {', '.join(missed)}" if missed else "all targets met"))
    if args.json:
        results["rows"] = rows
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if (args.check and missed) else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # a bug or a broken setup: not a missed target
        import traceback
        traceback.print_exc()
        sys.exit(2)
