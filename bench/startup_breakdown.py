#!/usr/bin/python3
"""Where portal-run's start-up time goes (a diagnostic companion of overhead.py).

    /usr/bin/python3 bench/startup_breakdown.py [--portal-run PATH] [--runs N]

Times, interleaved, the whole process of:
  /bin/true                    fork/exec floor of the harness
  portal-run --version         the launcher alone (exec, dynamic linking, CLI parsing)
  python hello.py              the baseline
  python -c BOOT script hello  the interpreter with Portal's bootstrap, no launcher
  portal-run hello.py          the whole thing
so that  launcher = portal-run - (python -c BOOT)  and  bootstrap = (python -c BOOT)
- python, for the same environment cases as overhead.py (with and without
PYTHONDONTWRITEBYTECODE when the caller sets it).  Then lists the modules imported
under portal-run only (with their import time from PYTHONPROFILEIMPORTTIME).  The `python -c BOOT ...` command is the
exact command line portal-run gives its interpreter, read back from
/proc/self/cmdline by a probe script run under portal-run (so it follows
whatever protocol include/portal/interpreter_command.hpp defines).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead import (PYTHON, WORKLOADS, bench_env, find_portal_run,  # noqa: E402
                      startup_cases)

PROBE = "import sys; sys.stdout.write(open('/proc/self/cmdline').read())\n"


def interpreter_command(portal_run, script, env):
    """The argv portal-run execs for `portal-run script`."""
    with tempfile.TemporaryDirectory() as tmp:
        probe = os.path.join(tmp, "probe.py")
        with open(probe, "w") as f:
            f.write(PROBE)
        out = subprocess.run([portal_run, probe], env=env, capture_output=True,
                             text=True, check=True).stdout
    argv = out.rstrip("\0").split("\0")
    if probe not in argv:
        sys.exit(f"startup_breakdown.py: cannot find the script in {argv!r}")
    return [script if a == probe else a for a in argv]


def breakdown(portal_run, env, runs, label):
    with tempfile.TemporaryDirectory(prefix="portal-bench-") as tmp:
        # A directory of its own: no cache left by an earlier run is found.
        hello = os.path.join(tmp, "hello.py")
        shutil.copyfile(os.path.join(WORKLOADS, "hello.py"), hello)
        direct = interpreter_command(portal_run, hello, env)
        cmds = {
            "/bin/true": ["/bin/true"],
            "portal-run --version": [portal_run, "--version"],
            "python hello.py": [PYTHON, hello],
            "python -c BOOT script hello.py": direct,
            "portal-run hello.py": [portal_run, hello],
        }
        wall = {k: [] for k in cmds}
        names = list(cmds)
        for i in range(runs + 3):
            for name in (names if i % 2 == 0 else names[::-1]):
                t0 = time.perf_counter()
                subprocess.run(cmds[name], env=env, stdout=subprocess.DEVNULL, check=True)
                if i >= 3:
                    wall[name].append((time.perf_counter() - t0) * 1e3)
        imports = {}
        for who, argv in (("python", [PYTHON, hello]), ("portal-run", [portal_run, hello])):
            err = subprocess.run(argv, env=dict(env, PYTHONPROFILEIMPORTTIME="1"),
                                 capture_output=True, text=True, check=True).stderr
            imports[who] = {}
            for line in err.splitlines():
                if line.startswith("import time:") and line.count("|") == 2:
                    _, cumulative, mod = line.split("|")
                    if cumulative.strip().isdigit():
                        imports[who][mod.strip()] = int(cumulative.strip())

    print(f"== {label}")
    print("interpreter command: " + " ".join(
        repr(a) if " " in a or "'" in a else a for a in direct))
    print(f"{'process':<32} {'median ms':>10} {'min ms':>8}")
    med = {}
    for name in names:
        med[name] = statistics.median(wall[name])
        print(f"{name:<32} {med[name]:>10.1f} {min(wall[name]):>8.1f}")
    launcher = med["portal-run hello.py"] - med["python -c BOOT script hello.py"]
    bootstrap = med["python -c BOOT script hello.py"] - med["python hello.py"]
    print(f"launcher (supervisor + extra fork/exec/wait): {launcher:+.1f} ms")
    print(f"bootstrap inside python:                      {bootstrap:+.1f} ms")
    print(f"total portal-run - python:                    "
          f"{med['portal-run hello.py'] - med['python hello.py']:+.1f} ms")
    extra = sorted(set(imports["portal-run"]) - set(imports["python"]))
    print("imported under portal-run only (cumulative us, PYTHONPROFILEIMPORTTIME; "
          "nested imports are included in their parent's figure):")
    for mod in extra:
        print(f"  {mod:<34} {imports['portal-run'][mod]:>6}")
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--portal-run", metavar="PATH")
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    portal_run, _ = find_portal_run(args.portal_run)
    print(f"portal-run: {portal_run}\n")
    for label, env in startup_cases(bench_env()):
        breakdown(portal_run, env, args.runs, label)
    return 0


if __name__ == "__main__":
    sys.exit(main())
