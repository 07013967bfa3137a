"""Shared by the workloads: time a piece of work inside the process and report it.

Each workload times its work with time.perf_counter() (so process start-up,
imports and interpreter finalisation are excluded) and prints one line

    PORTAL_BENCH {"workload": ..., "times": [seconds, ...], "check": ...}

on stdout.  "times" holds one entry per inner repetition (after an untimed
warm-up); "check" is a value derived from the computation so that the harness
can verify both runners did exactly the same work; "hooks" tells whether a
frame-evaluation, trace or profile function was in force.
"""
import json
import os
import resource
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


def hooks():
    """Evaluation hooks in force: the frame-evaluation function of the interpreter
    (is it CPython's default _PyEval_EvalFrameDefault?), the trace and profile
    functions.  Checked after the timed work (ctypes is imported only then)."""
    result = {"trace": repr(sys.gettrace()), "profile": repr(sys.getprofile())}
    try:
        import ctypes
        api = ctypes.pythonapi
        api.PyInterpreterState_Get.restype = ctypes.c_void_p
        get = api._PyInterpreterState_GetEvalFrameFunc
        get.restype = ctypes.c_void_p
        get.argtypes = [ctypes.c_void_p]
        current = get(api.PyInterpreterState_Get())
        default = ctypes.cast(api._PyEval_EvalFrameDefault, ctypes.c_void_p).value
        result["eval_frame_default"] = current == default
    except (ImportError, AttributeError, OSError):
        result["eval_frame_default"] = None  # cannot tell
    return result


def measure(name, work, warmup=True, info=None):
    """Run work() once untimed (warm-up), then reps() timed repetitions."""
    if warmup:
        work()
    times = []
    cpu_times = []
    check = None
    switched = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
    for _ in range(reps()):
        c0 = time.process_time()
        t0 = time.perf_counter()
        check = work()
        times.append(time.perf_counter() - t0)
        cpu_times.append(time.process_time() - c0)
    # Involuntary context switches during the timed work: how often another task
    # (another process, or a supervisor's thread) took this one's core.
    switched = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw - switched
    line = json.dumps({"workload": name, "times": times, "cpu_times": cpu_times,
                       "preempted": switched,
                       "check": check,
                       "pid": os.getpid(), "info": info, "hooks": hooks()})
    sys.stdout.write("PORTAL_BENCH " + line + "\n")
    sys.stdout.flush()
