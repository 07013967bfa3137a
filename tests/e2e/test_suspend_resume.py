"""Suspend and resume, end to end: an out-of-memory error in a loop of the user's
code suspends the job (exit 75), and `portal resume JOB` continues it in a new
process from that iteration; the results are those of an uninterrupted run.

Each case runs a program of the corpus (tests/e2e/resume) under /usr/bin/python3
(the reference), then, in a fresh copy of the corpus at the same path, under
portal-run with PORTAL_FAKE_OOM set (docs/architecture.md, "The fake-OOM fixture": the fixture raises the chosen
error when a line starts for the HIT-th time in the job's life), and resumes the job
with `portal resume JOB`, each time in a new process started from another working
directory, as many times as it suspends.  Then:

  - every suspended run exits 75 and ends its stderr with the suspension report:
    the error and where it was raised, the loop it continues from (file:line,
    function, iteration), the job, the checkpoint's size and directory, the expiry,
    and the `portal resume JOB --mem N` command;
  - the stdout of all the runs, concatenated, is python's; so is their stderr
    without the reports; the last run's exit status is python's;
  - the files the program wrote are python's, byte for byte.

The fixture fires at the start of a statement, before it runs: the failed iteration
runs again from its start, so the cases put it before anything of that iteration
changes the program's state (test_failed_iteration_runs_again shows what happens to
what the iteration did before the error).  Lines are named by markers in the corpus,
a comment `# [name]` at the end of the line.

Declines (no job, python's behaviour), the program's own MemoryError handlers,
checkpoint size and liveness, and a source changed under a suspended job have tests
of their own below.
"""
import calendar
import dataclasses
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest

from conftest import PYTHON, RUN_TIMEOUT, base_env, portal_status_for

CORPUS = Path(__file__).resolve().parent / "resume"
SUSPENDED = 75


# --- the corpus: lines named by markers -------------------------------------------------

@functools.lru_cache(maxsize=None)
def line_of(filename: str, marker: str) -> int:
    """The line of corpus file `filename` that ends with the comment `# [marker]`."""
    lines = (CORPUS / filename).read_text(encoding="utf-8").splitlines()
    found = [n for n, text in enumerate(lines, 1) if text.rstrip().endswith(f"# [{marker}]")]
    assert len(found) == 1, f"{filename}: marker [{marker}] found on lines {found}"
    return found[0]


def oom(filename: str, marker: str, hit: int = 1, kind: Optional[str] = None) -> str:
    """A PORTAL_FAKE_OOM spec for the line of `filename` marked `marker`."""
    spec = f"/{filename}:{line_of(filename, marker)}"
    if hit != 1:
        spec += f"@{hit}"
    if kind:
        spec += f"={kind}"
    return spec


@functools.lru_cache(maxsize=None)
def importable(module: str) -> bool:
    return subprocess.run([PYTHON, "-c", f"import {module}"], capture_output=True,
                          timeout=RUN_TIMEOUT).returncode == 0


@functools.lru_cache(maxsize=None)
def torch_oom_name() -> str:
    """The name python prints for torch's out-of-memory error, as the interpreter
    under test's torch defines it (torch 1.13: torch.cuda.OutOfMemoryError; 2.x:
    torch.OutOfMemoryError, of which torch.cuda's is an alias)."""
    p = subprocess.run([PYTHON, "-c", "import torch; e = torch.cuda.OutOfMemoryError; "
                        "print(f'{e.__module__}.{e.__qualname__}')"],
                       capture_output=True, timeout=RUN_TIMEOUT)
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout.decode().strip()


# An error text's placeholder for that name (Stop.error).
TORCH_OOM = "{torch_oom}"


@functools.lru_cache(maxsize=None)
def interpreter_version() -> tuple:
    """(major, minor) of the interpreter under test."""
    p = subprocess.run([PYTHON, "-c", "import sys; print(*sys.version_info[:2])"],
                       capture_output=True, timeout=RUN_TIMEOUT, check=True)
    return tuple(int(x) for x in p.stdout.split())


@functools.lru_cache(maxsize=None)
def range_iterators_count() -> bool:
    """Whether the interpreter under test's range iterator tells how many items it
    gave (3.11: its __reduce__ state; 3.12+ keep only range(next, stop, step)).
    Where it does not, a loop over a range made elsewhere or from a start computed
    at run time names no iteration (bytecode/range_loops.py reads the start only
    from `range(n)` and `range(LITERAL, ...)` in the loop's own header)."""
    p = subprocess.run([PYTHON, "-c", "it = iter(range(5)); next(it); "
                        "print(isinstance(it.__reduce__()[2], int))"],
                       capture_output=True, timeout=RUN_TIMEOUT, check=True)
    return p.stdout.strip() == b"True"


def if_range_counts(iteration: int) -> Optional[int]:
    """The iteration a loop over a range the loop's header does not spell out names."""
    return iteration if range_iterators_count() else None


# What recursion_depth.py prints in the last iteration of each loop (the depth
# depth_now() reads, how deep reach() then gets), as each interpreter counts depth:
# 3.11 counts the C-level call of __init__ by the class too, 3.12+ Python frames only.
RECURSION_DEPTH_LINES = {
    (3, 11): {"f": "f 2 5 996", "init": "init 2 ('6', 995)", "method": "method 2 5 1992"},
    (3, 12): {"f": "f 2 4 996", "init": "init 2 ('4', 996)", "method": "method 2 4 1992"},
    (3, 13): {"f": "f 2 4 996", "init": "init 2 ('4', 996)", "method": "method 2 4 1992"},
    # measured: python3.14 recursion_depth.py in the forky root prints 3.13's lines
    (3, 14): {"f": "f 2 4 996", "init": "init 2 ('4', 996)", "method": "method 2 4 1992"},
}


def recursion_depth_line(loop: str) -> str:
    lines = RECURSION_DEPTH_LINES.get(interpreter_version())
    assert lines is not None, f"no recursion depths known for CPython {interpreter_version()}"
    return lines[loop]


# --- cases ------------------------------------------------------------------------------

@dataclasses.dataclass
class Stop:
    """One expected suspension and what its report must say."""
    loop: str                         # marker of the loop resumed ("file.py:marker" elsewhere)
    function: str = "<module>"        # the function the loop is in
    iteration: Optional[int] = None   # the iteration named, counted from 1 (None: none named)
    error: str = "MemoryError"        # the error's text in the report
    at: str = "oom"                   # marker of the line that raised ("file.py:marker")
    min_size: int = 0                 # bounds on the checkpoint's size, bytes
    max_size: int = 64 << 20


@dataclasses.dataclass
class Case:
    id: str
    script: str
    args: List[str] = dataclasses.field(default_factory=list)
    fake: List[str] = dataclasses.field(default_factory=list)   # PORTAL_FAKE_OOM specs
    stops: List[Stop] = dataclasses.field(default_factory=list)
    rc: int = 0                       # python's exit status
    expect: List[str] = dataclasses.field(default_factory=list)  # in python's stdout
    resumes: Optional[int] = None     # `portal resume` runs (default: one per stop)
    before: Optional[Callable[[Path], None]] = None       # before portal-run, in its copy
    between: Optional[Callable[[Path, int], None]] = None  # before resume i
    needs: str = ""                   # a module the case needs: skipped without it
    xfail: str = ""                   # a known product bug: the test must fail

    def __post_init__(self):
        if self.resumes is None:
            self.resumes = len(self.stops)


# --- running ----------------------------------------------------------------------------

@dataclasses.dataclass
class Run:
    stdout: bytes
    stderr: bytes
    returncode: int
    record: dict                      # the job's job.json after the run ({} if none)


@dataclasses.dataclass
class Outcome:
    python: Run
    python_files: Dict[str, bytes]
    runs: List[Run]                   # portal-run, then each `portal resume`
    files: Dict[str, bytes]
    root: Path                        # the corpus copy the portal runs used
    home: Path                        # PORTAL_HOME
    jobs: List[str]                   # job ids, in the order reported


def fresh_corpus(workdir: Path) -> Path:
    root = workdir / "resume"
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(CORPUS, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def snapshot(root: Path) -> Dict[str, bytes]:
    """Every file under root but bytecode caches, by relative path."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            out[str(path.relative_to(root))] = path.read_bytes()
    return out


def run(cmd, cwd, env) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=RUN_TIMEOUT)


JOB_RE = re.compile(rb"^portal: suspended: job (\S+),", re.M)


def job_record(home: Path, job: Optional[str]) -> dict:
    if not job:
        return {}
    try:
        return json.loads((home / "jobs" / job / "job.json").read_text())
    except FileNotFoundError:
        return {}


def execute(case: Case, portal_run: str, portal: str, workdir: Path) -> Outcome:
    root = fresh_corpus(workdir)
    p = run([PYTHON, case.script, *case.args], root, base_env())
    python = Run(p.stdout, p.stderr, p.returncode, {})
    python_files = snapshot(root)

    root = fresh_corpus(workdir)
    home = workdir / "home"
    if case.before:
        case.before(root)
    env = base_env({"PORTAL_HOME": str(home)})
    if case.fake:
        env["PORTAL_FAKE_OOM"] = ",".join(case.fake)
    p = run([portal_run, case.script, *case.args], root, env)
    jobs = [m.decode() for m in JOB_RE.findall(p.stderr)]
    runs = [Run(p.stdout, p.stderr, p.returncode, job_record(home, jobs[-1] if jobs else None))]
    for i in range(case.resumes):
        if not jobs:
            break
        if case.between:
            case.between(root, i)
        # A new process, from another directory, without the fixture's variable: the
        # job brings its own working directory and environment.
        p = run([portal, "resume", jobs[-1]], workdir, base_env({"PORTAL_HOME": str(home)}))
        jobs += [m.decode() for m in JOB_RE.findall(p.stderr)]
        runs.append(Run(p.stdout, p.stderr, p.returncode, job_record(home, jobs[-1])))
    return Outcome(python, python_files, runs, snapshot(root), root, home, jobs)


# --- the suspension report ---------------------------------------------------------------

REPORT_RE = re.compile(
    r"portal: suspended: (?P<error>.+) at (?P<error_file>[^\n]+):(?P<error_line>\d+)\n"
    r"(?:portal: suspended: what ran short: (?P<short>[^\n]+)\n)?"     # a real shortage only
    r"portal: suspended: will continue from the loop at (?P<loop_file>[^\n]+):(?P<loop_line>\d+)"
    r" in (?P<function>[^\n]+)\(\)(?:, iteration (?P<iteration>\d+) \(0-based\))?;"
    r" that iteration runs again from its start\n"
    r"(?P<passed>(?:portal: suspended: the loop at [^\n]+ was passed over: [^\n]+\n)*)"   # inner loops that declined
    r"portal: suspended: job (?P<job>\S+), checkpoint (?P<size>\d+(?:\.\d)?) (?P<unit>bytes|KiB|MiB|GiB),?"
    r" in (?P<dir>[^\n]+), kept until (?P<expiry>\d{4}-\d\d-\d\d \d\d:\d\d) UTC \(3 days\)\n"
    r"portal: suspended: resume it on a machine with (?:more memory:"
    r" portal resume (?P<job2>\S+) --mem (?P<mem>\d+)G"   # in GiB (hint.py)
    r"(?: \(this machine has [\d.]+ GiB: on another one, or with --on slurm\))?"
    r"|a GPU of more memory(?: than this one's \([^\n]*\))?: portal resume (?P<gpu_job>\S+) --gpu MODEL"
    r" \(e\.g\. --gpu A100; --on slurm asks Slurm for one\))\n\Z")

UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def split_report(stderr: bytes):
    """(the program's own stderr, the report's fields) of a suspended run."""
    text = stderr.decode("utf-8", "backslashreplace")
    start = text.find("portal: suspended: ")
    assert start >= 0, f"no suspension report on stderr:\n{text}"
    m = REPORT_RE.match(text, start)
    assert m, f"the suspension report is not as expected:\n{text[start:]}"
    return stderr[:len(text[:start].encode("utf-8", "backslashreplace"))], m.groupdict()


def marker_line(case: Case, marker: str):
    filename, _, name = marker.rpartition(":")
    filename = filename or case.script
    return filename, line_of(filename, name)


def check_report(case: Case, stop: Stop, report: dict, outcome: Outcome, when: float):
    root = outcome.root
    where = f"report {report!r}"
    error = stop.error.replace(TORCH_OOM, torch_oom_name()) if TORCH_OOM in stop.error else stop.error
    assert report["error"] == error, where
    # "what ran short" is said of a real shortage, never of the fake-OOM fixture's
    if case.fake:
        assert report["short"] is None, where
    elif error == "MemoryError":
        assert report["short"], where
    filename, line = marker_line(case, stop.at)
    assert (report["error_file"], int(report["error_line"])) == (str(root / filename), line), where
    filename, line = marker_line(case, stop.loop)
    assert (report["loop_file"], int(report["loop_line"])) == (str(root / filename), line), where
    assert report["function"] == stop.function, where
    # the report counts as the program does, from 0 (issue 11): the cases from 1
    got = None if report["iteration"] is None else int(report["iteration"]) + 1
    assert got == stop.iteration, where
    # what ran short: a GPU's memory for a CUDA error (python/_portal/rescue/hint.py), else the machine's
    if "CUDA out of memory" in report["error"]:
        assert report["gpu_job"] == report["job"] and report["mem"] is None, where
    else:
        assert report["job2"] == report["job"], where
        assert int(report["mem"]) >= 1, where
    job_dir = outcome.home / "jobs" / report["job"]
    assert report["dir"] == str(job_dir), where
    assert (job_dir / "checkpoint").exists(), where
    size = float(report["size"]) * UNITS[report["unit"]]
    assert stop.min_size <= size <= stop.max_size, f"checkpoint size out of bounds: {where}"
    expiry = calendar.timegm(time.strptime(report["expiry"], "%Y-%m-%d %H:%M"))
    assert abs(expiry - (when + 3 * 24 * 3600)) < 600, f"expiry is not in 3 days: {where}"


def check_suspensions(case: Case, outcome: Outcome):
    """Each run but the last suspended as the case says; returns the program's
    stderr of every run (the reports taken out)."""
    runs, stops = outcome.runs, case.stops
    assert len(runs) == len(stops) + 1, f"{len(runs)} runs for {len(stops)} suspensions"
    program_stderr = []
    for i, (r, stop) in enumerate(zip(runs, stops)):
        assert r.returncode == SUSPENDED, (
            f"run {i} exited {r.returncode}, not {SUSPENDED} (suspended); stderr:\n"
            f"{r.stderr.decode(errors='replace')}")
        own, report = split_report(r.stderr)
        check_report(case, stop, report, outcome, time.time())
        assert report["job"] == outcome.jobs[0], "a resumed job suspends under its own id"
        assert r.record.get("state") == "suspended", r.record
        size = float(report["size"]) * UNITS[report["unit"]]
        assert abs(r.record.get("checkpoint_bytes", 0) - size) <= size / 20 + 1, (
            f"the report says {report['size']} {report['unit']}, the job record {r.record}")
        program_stderr.append(own)
    assert b"portal: suspended" not in runs[-1].stderr, runs[-1].stderr.decode(errors="replace")
    return program_stderr + [runs[-1].stderr]


def assert_equal_outputs(case: Case, outcome: Outcome, program_stderr: List[bytes]):
    python = outcome.python
    stdout = b"".join(r.stdout for r in outcome.runs)
    assert stdout.decode(errors="replace") == python.stdout.decode(errors="replace")
    assert stdout == python.stdout
    assert b"".join(program_stderr).decode(errors="replace") == python.stderr.decode(errors="replace")
    assert outcome.runs[-1].returncode == portal_status_for(python.returncode)
    assert outcome.files.keys() == outcome.python_files.keys(), "the files written differ"
    for name, content in outcome.python_files.items():
        assert outcome.files[name] == content, f"{name} differs from python's"


def check_python(case: Case, outcome: Outcome):
    python = outcome.python
    assert python.returncode == case.rc, (
        f"the case no longer exercises what it should: python3 exited {python.returncode}; "
        f"stderr {python.stderr.decode(errors='replace')}")
    for piece in case.expect:
        assert piece.encode() in python.stdout, f"python3's stdout lacks {piece!r}"


# --- what runs ahead ---------------------------------------------------------------------

@pytest.fixture(scope="session")
def portal(portal_cli):
    """The `portal` command: $PORTAL (CTest sets it), else the one beside portal-run."""
    path = os.environ.get("PORTAL")
    if not path:
        return portal_cli
    path = os.path.abspath(path)
    assert os.access(path, os.X_OK), f"PORTAL={path} is not an executable"
    return path


@pytest.fixture(scope="module")
def outcomes(request, portal_run, portal, tmp_path_factory):
    """Every selected case of this module started at once on a thread pool (the runs
    wait on processes); each test waits for its own.  Keyed by node id."""
    pool = ThreadPoolExecutor(max_workers=max(2, len(os.sched_getaffinity(0))))
    futures = {}
    for item in request.session.items:
        if item.module is not sys.modules[__name__] or item.nodeid in futures:
            continue
        case = getattr(item, "callspec", None) and item.callspec.params.get("case")
        if not isinstance(case, Case) or (case.needs and not importable(case.needs)):
            continue
        workdir = tmp_path_factory.mktemp(re.sub(r"\W+", "_", item.name)[:60])
        futures[item.nodeid] = pool.submit(execute, case, portal_run, portal, workdir)
    yield futures
    pool.shutdown(cancel_futures=True)


def outcome_of(case: Case, outcomes, request) -> Outcome:
    future = outcomes.get(request.node.nodeid)
    if future is None:
        pytest.skip(f"`import {case.needs}` fails under {PYTHON}")
    return future.result()


def params(cases):
    return [pytest.param(c, id=c.id, marks=[pytest.mark.xfail(strict=True, reason=c.xfail)]
                         if c.xfail else []) for c in cases]


# --- suspend, resume, same results as python -----------------------------------------------

def _remove(name):
    def between(root: Path, i: int):
        (root / name).unlink()
    return between


def _create(name):
    def before(root: Path):
        (root / name).write_text("this machine is too small\n")
    return before


ITERATORS = {
    # kind: the iteration the report names when the 4th item fails (None: none,
    # the iterator does not tell how many items it gave)
    "range": if_range_counts(4), "list": 4, "tuple": 4, "str": 4, "enumerate": 4,
    "dict_keys": None, "dict_items": None, "dict_values": None, "zip": None, "count": None,
    "islice": None, "chain": None, "product": None, "generator": None, "iterator_class": None,
}

CASES = [
    # where the loop is
    Case("module_level_for", "module_for.py", fake=[oom("module_for.py", "oom", 4)],
         stops=[Stop("loop", iteration=4)], expect=["next random"]),
    Case("module_level_while", "module_while.py", fake=[oom("module_while.py", "oom", 5)],
         stops=[Stop("loop")], expect=["acc ["]),
    Case("function_positional", "func_positional.py",
         fake=[oom("func_positional.py", "oom", 6)],
         stops=[Stop("loop", "mean_of_squares", 6)], expect=["mean 41.125"]),
    Case("three_calls_deep", "deep_calls.py", fake=[oom("deep_calls.py", "oom", 8)],
         stops=[Stop("loop", "one_epoch", 3)], expect=["losses"]),
    *[Case(f"call_{kind}", "calls.py", [kind], fake=[oom("calls.py", f"{m}_oom", hit)],
           stops=[Stop(f"{m}_loop", function, iteration, at=f"{m}_oom")])
      for kind, m, function, hit, iteration in [
          ("keyword", "kw", "keyword_only", 3, if_range_counts(3)),  # range(start, stop, step)
          ("star", "star", "star_args", 4, 4),
          ("method", "method", "add_all", 2, 2),
          ("static", "static", "static_sum", 3, 3),
          ("classmethod", "class", "from_items", 3, 3),
          ("closure", "closure", "bump", 4, 4),
          ("defaults", "defaults", "with_defaults", 3, 3),
          ("lambda", "lambda", "apply_all", 3, 3),
          ("decorator", "deco", "decorated", 3, 3),  # through a *args/**kwargs wrapper
          ("init", "init", "__init__", 4, 4),        # Cls(...) -> __init__
          ("partial", "lambda", "apply_all", 2, 2),  # functools.partial(f, one_arg)
      ]],
    # a second call of the closure (its cells from before the suspension) and of
    # the function with defaults (the mutated default list)
    Case("call_closure_second_call", "calls.py", ["closure"],
         fake=[oom("calls.py", "closure_oom", 8)],
         stops=[Stop("closure_loop", "bump", 2, at="closure_oom")]),
    Case("call_defaults_second_call", "calls.py", ["defaults"],
         fake=[oom("calls.py", "defaults_oom", 7)],
         stops=[Stop("defaults_loop", "with_defaults", 2, at="defaults_oom")]),
    Case("call_through_lambda", "calls.py", ["lambda"], fake=[oom("calls.py", "lambda_oom", 7)],
         stops=[Stop("lambda_loop", "apply_all", 2, at="lambda_oom")]),
    # nested loops: the innermost one the error passes through
    Case("nested_module_level", "nested_loops.py", ["module"],
         fake=[oom("nested_loops.py", "oom", 8)], stops=[Stop("inner", iteration=2)]),
    Case("nested_while_in_for", "nested_loops.py", ["function"],
         fake=[oom("nested_loops.py", "f_oom", 7)], stops=[Stop("f_inner", "scan", at="f_oom")]),
    Case("fallback_to_outer_loop", "fallback.py", fake=[oom("fallback.py", "oom", 8)],
         stops=[Stop("outer", iteration=2)]),
    # what the loop iterates over
    *[Case(f"iterate_{kind}", "iterators.py", [kind], fake=[oom("iterators.py", "oom", 4)],
           stops=[Stop("loop", "consume", iteration)])
      for kind, iteration in ITERATORS.items()],
    # generators
    Case("loop_in_generator", "gen_inner_loop.py", ["function"],
         fake=[oom("gen_inner_loop.py", "oom", 5)],
         stops=[Stop("gen_loop", "batches", 5)], expect=["trained on 11"]),
    Case("loop_in_generator_module_level", "gen_inner_loop.py", ["module"],
         fake=[oom("gen_inner_loop.py", "oom", 6)], stops=[Stop("gen_loop", "batches", 6)]),
    Case("generators_held_in_variables", "held_generators.py",
         fake=[oom("held_generators.py", "oom", 3)], stops=[Stop("loop", "main", 3)],
         expect=["pending ['R', 'E', 'S', 'U', 'M', 'E']"]),
    # a loop inside an `except` block: the exception handled there is restored
    Case("loop_in_except_block_function", "except_block.py", ["function"],
         fake=[oom("except_block.py", "f_oom", 3)],
         stops=[Stop("f_loop", "retry", 3, at="f_oom")], expect=["context KeyError"]),
    Case("loop_in_except_block_module_level", "except_block.py", ["module"],
         fake=[oom("except_block.py", "oom", 2)], stops=[Stop("loop", iteration=2)],
         expect=["bare raise re-raises it: True"]),
    # the recursion depth after a resume: re-entered callers count as under python
    Case("recursion_depth_function_call_ex", "recursion_depth.py",
         fake=[oom("recursion_depth.py", "f_oom", 2)],
         stops=[Stop("f_loop", "f", 2, at="f_oom")], expect=[recursion_depth_line("f")]),
    Case("recursion_depth_init", "recursion_depth.py",
         fake=[oom("recursion_depth.py", "init_oom", 2)],
         stops=[Stop("init_loop", "__init__", 2, at="init_oom")], expect=[recursion_depth_line("init")]),
    Case("recursion_depth_method", "recursion_depth.py",
         fake=[oom("recursion_depth.py", "run_oom", 3)],
         stops=[Stop("run_loop", "run", 3, at="run_oom")], expect=[recursion_depth_line("method")]),
    Case("recursion_limit_kept_high", "recursion_limit_set.py", ["2500"],
         fake=[oom("recursion_limit_set.py", "oom", 2)], stops=[Stop("loop", iteration=2)],
         expect=["2 2500 2498"]),
    Case("recursion_limit_kept_low", "recursion_limit_set.py", ["40"],
         fake=[oom("recursion_limit_set.py", "oom", 2)], stops=[Stop("loop", iteration=2)],
         expect=["2 40 38"]),
    # files and with blocks
    Case("with_open_module_level", "with_open.py", ["module"],
         fake=[oom("with_open.py", "oom", 5)], stops=[Stop("loop", iteration=5)]),
    Case("with_open_in_function", "with_open.py", ["function"],
         fake=[oom("with_open.py", "f_oom", 5)], stops=[Stop("f_loop", "write_all", 5, at="f_oom")]),
    # the program's own handlers of other errors inside the loop
    Case("try_except_in_loop", "try_in_loop.py", fake=[oom("try_in_loop.py", "oom", 7)],
         stops=[Stop("loop", iteration=7)], expect=["skipped", "zero at"]),
    # the program's state
    Case("classes_and_dataclasses", "classes.py", fake=[oom("classes.py", "oom", 5)],
         stops=[Stop("loop", iteration=5)], expect=["frozen FrozenInstanceError"]),
    Case("user_module_state", "uses_module.py", fake=[oom("uses_module.py", "oom", 4)],
         stops=[Stop("loop", iteration=4)], expect=["True True"]),
    Case("user_module_raises", "uses_module.py", fake=[oom("statemod.py", "mod_oom", 3)],
         stops=[Stop("loop", iteration=3, at="statemod.py:mod_oom")]),
    Case("recursion", "recursion.py", fake=[oom("recursion.py", "oom", 4)],
         stops=[Stop("loop", "walk", 2)], expect=["total"]),
    Case("random_stream", "random_stream.py", fake=[oom("random_stream.py", "oom", 5)],
         stops=[Stop("loop", iteration=5)]),
    Case("numpy_state", "numpy_state.py", fake=[oom("numpy_state.py", "oom", 4)],
         stops=[Stop("loop", "train", 4)], needs="numpy", expect=["True True"]),
    # several suspensions in one job
    Case("two_suspensions", "two_suspensions.py",
         fake=[oom("two_suspensions.py", "oom", 3), oom("two_suspensions.py", "oom2", 2)],
         stops=[Stop("loop", "phase", 3), Stop("loop2", at="oom2")]),
    # @HIT counts the line's starts over the job's life: after the first suspension
    # at hit 3 the re-run iteration 3 is hit 4, so hit 7 is iteration 6.
    Case("same_line_suspends_again", "hit_again.py",
         fake=[oom("hit_again.py", "oom", 3), oom("hit_again.py", "oom", 7, "cuda")],
         stops=[Stop("loop", "work", 3),
                Stop("loop", "work", 6, error="RuntimeError: CUDA out of memory. Tried to "
                                              "allocate 2.00 GiB (fake, PORTAL_FAKE_OOM)")]),
    # the job's final status is the program's
    Case("final_sys_exit", "final_status.py", ["exit"], fake=[oom("final_status.py", "oom", 3)],
         stops=[Stop("loop", "work", 3)], rc=3),
    Case("final_uncaught_exception", "final_status.py", ["raise"],
         fake=[oom("final_status.py", "oom", 3)], stops=[Stop("loop", "work", 3)], rc=1),
    # a real allocation failure, not the fixture: the job resumes once the memory is there
    Case("real_memory_error", "real_oom_rescued.py", before=_create("small_machine"),
         between=_remove("small_machine"), stops=[Stop("loop", iteration=3)]),
    # each kind of out-of-memory error the fixture raises
    *[Case(f"kind_{kind}", "kinds.py", fake=[oom("kinds.py", "oom", 3, kind)],
           stops=[Stop("loop", "work", 3, error=error)], needs="torch" if kind == "torch" else "")
      for kind, error in [
          ("memory", "MemoryError"),
          ("torch", f"{TORCH_OOM}: CUDA out of memory. Tried to allocate 2.00 GiB "
                    "(fake, PORTAL_FAKE_OOM)"),
          ("cuda", "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB "
                   "(fake, PORTAL_FAKE_OOM)"),
          ("cpu", "RuntimeError: [enforce fail at alloc_cpu.cpp:75] data. DefaultCPUAllocator: "
                  "can't allocate memory: you tried to allocate 8589934592 bytes. "
                  "Error code 12 (Cannot allocate memory)"),
      ]],
    # liveness: a 50 MB temporary that is dead at the body's start is not saved; a
    # live one of the same size is (numpy's out of band)
    Case("dead_temporary_not_saved", "bigtemp.py", ["dead"], fake=[oom("bigtemp.py", "oom", 3)],
         stops=[Stop("loop", "work", 3, max_size=1 << 20)]),
    Case("live_object_saved", "bigtemp.py", ["live"], fake=[oom("bigtemp.py", "oom", 3)],
         stops=[Stop("loop", "work", 3, min_size=50_000_000)]),
    Case("live_numpy_array_saved", "bigtemp.py", ["live_numpy"],
         fake=[oom("bigtemp.py", "oom", 3)], needs="numpy",
         stops=[Stop("loop", "work", 3, min_size=50_000_000)]),
]


@pytest.mark.parametrize("case", params(CASES))
def test_suspend_resume(case, outcomes, request):
    outcome = outcome_of(case, outcomes, request)
    check_python(case, outcome)
    program_stderr = check_suspensions(case, outcome)
    assert_equal_outputs(case, outcome, program_stderr)
    record = outcome.runs[-1].record
    assert record.get("state") == ("completed" if case.rc == 0 else "failed"), record
    assert record.get("exit_status") == case.rc, record


# --- the failed iteration runs again from its start --------------------------------------

DOUBLE = Case("double_effect", "double_effect.py", fake=[oom("double_effect.py", "oom", 4)],
              stops=[Stop("loop", iteration=4)])


@pytest.mark.parametrize("case", params([DOUBLE]))
def test_failed_iteration_runs_again(case, outcomes, request):
    """What the failed iteration did before the error (a line appended to a file,
    a line printed) happens twice; nothing of the iterations before it does."""
    outcome = outcome_of(case, outcomes, request)
    check_python(case, outcome)
    check_suspensions(case, outcome)
    python = outcome.python.stdout.decode()
    assert "begin 3\n" in python and "end 2 20\n" in python
    stdout = b"".join(r.stdout for r in outcome.runs).decode()
    assert stdout == python.replace("begin 3\n", "begin 3\nbegin 3\n")
    journal = outcome.python_files["journal.txt"].decode()
    assert outcome.files["journal.txt"].decode() == journal.replace("begin 3\n", "begin 3\nbegin 3\n")
    assert outcome.runs[0].stdout.decode().endswith("end 2 20\nbegin 3\n")
    assert outcome.runs[1].stdout.decode().startswith("begin 3\nend 3 30\n")
    assert outcome.runs[-1].returncode == 0


# --- source changed under a suspended job ---------------------------------------------------

def _edit_then_restore(name):
    def between(root: Path, i: int):
        path = root / name
        original = (CORPUS / name).read_bytes()
        path.write_bytes(original + b"# edited after the suspension\n" if i == 0 else original)
    return between


SOURCE_CHANGED = [
    # (case, the file edited after the suspension)
    (Case("script_changed", "func_positional.py", fake=[oom("func_positional.py", "oom", 6)],
          stops=[Stop("loop", "mean_of_squares", 6)], resumes=2,
          between=_edit_then_restore("func_positional.py")), "func_positional.py"),
    (Case("user_module_changed", "uses_module.py", fake=[oom("uses_module.py", "oom", 4)],
          stops=[Stop("loop", iteration=4)], resumes=2,
          between=_edit_then_restore("statemod.py")), "statemod.py"),
]


@pytest.mark.parametrize("case,changed", [pytest.param(*c, id=c[0].id) for c in SOURCE_CHANGED])
def test_resume_refuses_changed_source(case, changed, outcomes, request):
    """A source edited after the suspension: resume refuses, naming the file, and
    the job stays suspended; with the file restored it resumes as if nothing happened."""
    outcome = outcome_of(case, outcomes, request)
    suspended, refused, resumed = outcome.runs
    assert suspended.returncode == SUSPENDED
    own, report = split_report(suspended.stderr)
    assert refused.returncode not in (0, SUSPENDED), refused
    assert refused.stdout == b"", refused.stdout
    message = refused.stderr.decode(errors="replace")
    assert message.startswith("portal: ") and message.count("\n") == 1, message
    assert str(outcome.root / changed) in message, message
    assert "changed" in message and "stays suspended" in message, message
    assert refused.record.get("state") == "suspended", refused.record
    assert (outcome.home / "jobs" / report["job"] / "checkpoint").exists()
    # restored: the job continues, with python's results
    assert resumed.returncode == portal_status_for(outcome.python.returncode), resumed.stderr
    assert suspended.stdout + resumed.stdout == outcome.python.stdout
    assert own + resumed.stderr == outcome.python.stderr
    assert resumed.record.get("state") == "completed", resumed.record


# --- declines: nothing to resume, the error goes on as without Portal ----------------------

def assert_no_job(outcome: Outcome):
    """No suspension: the run's job (every run is one) ended as python's run did,
    with no checkpoint left."""
    assert not outcome.jobs
    jobs = outcome.home / "jobs"
    for job in jobs.iterdir() if jobs.exists() else []:
        record = json.loads((job / "job.json").read_text())
        assert record["state"] in ("failed", "completed"), record
        assert not [c.name for c in job.iterdir() if c.name.startswith(("checkpoint", ".checkpoint"))]


# Formats frames as the interpreter under test's own traceback module does: its
# stdin a JSON list of [file, line, function, first column, end column] (columns
# None: no carets), its stdout the frames' lines.
_FORMAT_FRAMES = """\
import json, sys, traceback
frames = [traceback.FrameSummary(f, n, name, end_lineno=n if c is not None else None,
                                 colno=c, end_colno=e)
          for f, n, name, c, e in json.load(sys.stdin)]
sys.stdout.write("".join(traceback.StackSummary.from_list(frames).format()))
"""


def traceback_text(root: Path, frames, last_line: str) -> str:
    """A traceback as python prints it, for frames [(file, marker, function,
    underlined)]: `underlined`, the part of the marked line that raised (None: the
    whole line), is where the frame's instruction is; the interpreter under test
    draws its carets (or none) there as its traceback module does.  The fixture
    raises at the start of a statement: its whole statement is underlined, up to
    the marker's comment."""
    spec = []
    for filename, marker, function, underlined in frames:
        line = line_of(filename, marker)
        source = (root / filename).read_text().splitlines()[line - 1]
        col = None if underlined is None else source.index(underlined)
        spec.append([str(root / filename), line, function, col,
                     None if col is None else col + len(underlined)])
    p = subprocess.run([PYTHON, "-c", _FORMAT_FRAMES], input=json.dumps(spec).encode(),
                       capture_output=True, timeout=RUN_TIMEOUT)
    assert p.returncode == 0, p.stderr.decode()
    return "Traceback (most recent call last):\n" + p.stdout.decode() + last_line + "\n"


# After python's own traceback of an out-of-memory error that no loop of the
# program's took, one line says why it was not rescued (the product page's table).
OUTSIDE_ANY_LOOP = ("portal: not rescued: it was raised outside any loop of the program's own code: "
                    "there is no iteration to retry\n")

DECLINES = [
    # (case, frames of the traceback, its last line, stdout, Portal's line after it)
    (Case("oom_outside_loop_module_level", "decline_outside_loop.py",
          fake=[oom("decline_outside_loop.py", "mod_oom")], rc=0),
     [("decline_outside_loop.py", "mod_oom", "<module>", "table = load(5)")],
     "MemoryError", "start\n", OUTSIDE_ANY_LOOP),
    (Case("oom_outside_loop_in_function", "decline_outside_loop.py",
          fake=[oom("decline_outside_loop.py", "fn_oom")], rc=0),
     [("decline_outside_loop.py", "mod_oom", "<module>", "load(5)"),
      ("decline_outside_loop.py", "fn_oom", "load", "data = list(range(n))")],
     "MemoryError", "start\n", OUTSIDE_ANY_LOOP),
    (Case("other_error_in_loop", "kinds.py", fake=[oom("kinds.py", "oom", 3, "other")], rc=0),
     [("kinds.py", "last_call", "<module>", "work([5, 6, 7, 8, 9])"),
      ("kinds.py", "oom", "work", "doubled = it * 2")],
     "RuntimeError: fake error that is not out of memory (PORTAL_FAKE_OOM)",
     "it 5 10\nit 6 12\n", ""),
]


@pytest.mark.parametrize("case,frames,last,stdout,why",
                         [pytest.param(*d, id=d[0].id) for d in DECLINES])
def test_decline(case, frames, last, stdout, why, outcomes, request):
    """Not out of memory, or out of memory outside any loop: the job fails as it
    would without Portal (exit 1, python's traceback of the error), and no job is
    created; for an out-of-memory error, one `portal: not rescued:` line says why."""
    outcome = outcome_of(case, outcomes, request)
    check_python(case, outcome)
    (r,) = outcome.runs
    assert r.returncode == 1, r.stderr
    assert r.stderr.decode() == traceback_text(outcome.root, frames, last) + why
    assert r.stdout.decode() == stdout
    assert outcome.python.stdout.startswith(r.stdout)
    assert_no_job(outcome)


# --- the program's own MemoryError handlers --------------------------------------------------

OWN_HANDLERS = [
    (Case("handler_around_call", "user_handles_fake.py", ["around"],
          fake=[oom("user_handles_fake.py", "oom", 3)]),
     4, "item 1\nitem 2\nhandled MemoryError in the program's own handler\n"),
    (Case("handler_tuple_of_types", "user_handles_fake.py", ["tuple"],
          fake=[oom("user_handles_fake.py", "oom", 3)]),
     5, "item 1\nitem 2\nhandled MemoryError\n"),
    (Case("handler_broad_except_exception", "user_handles_fake.py", ["broad"],
          fake=[oom("user_handles_fake.py", "oom", 3)]),
     6, "item 1\nitem 2\nbroad handler MemoryError\n"),
    (Case("handler_inside_loop_body", "user_handles_fake.py", ["inside"],
          fake=[oom("user_handles_fake.py", "skip_oom", 3)]),
     0, "item 1\nitem 2\nskipped the batch 3\nitem 4\nitem 5\n[3, 6, 12, 15]\n"),
]


@pytest.mark.parametrize("case,rc,stdout", [pytest.param(*d, id=d[0].id) for d in OWN_HANDLERS])
def test_program_handles_memory_error(case, rc, stdout, outcomes, request):
    """A `try/except MemoryError` of the program's own takes the error: Portal does
    not intervene (no report, no job); the handler runs and the exit status is the
    program's."""
    outcome = outcome_of(case, outcomes, request)
    (r,) = outcome.runs
    assert r.stderr == b""
    assert r.stdout.decode() == stdout
    assert r.returncode == rc
    assert_no_job(outcome)


REAL_OOM = [
    Case("real_handler_around_call", "user_handles_real.py", ["around"], rc=4,
         expect=["handled MemoryError"]),
    Case("real_handler_inside_loop_body", "user_handles_real.py", ["inside"],
         expect=["skipped the batch 3"]),
    Case("real_oom_outside_loop", "user_handles_real.py", ["uncaught_outside_loop"], rc=1),
]


@pytest.mark.parametrize("case", params(REAL_OOM))
def test_real_memory_error_as_python(case, outcomes, request):
    """A real allocation failure that the program handles, or that happens outside
    any loop: portal-run's stdout, stderr and status are python's (and, when it ends
    the program, one line saying why it was not rescued), and no job."""
    outcome = outcome_of(case, outcomes, request)
    check_python(case, outcome)
    (r,) = outcome.runs
    assert r.stdout.decode() == outcome.python.stdout.decode()
    why = OUTSIDE_ANY_LOOP if outcome.python.returncode == 1 else ""
    assert r.stderr.decode() == outcome.python.stderr.decode() + why
    assert r.returncode == outcome.python.returncode
    assert_no_job(outcome)
