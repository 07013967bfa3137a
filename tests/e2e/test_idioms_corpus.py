"""The new-user check (issue 26, item 9): a corpus of training idioms written the
way people write them (idioms_corpus/), each run once uninterrupted under python,
then suspended at each of the points its marker comments name - a fake
out-of-memory error before, inside and after its main computation (backward()
where it has one), and a real shortage under `portal-run --mem 1G` (a growing
allocation after the main computation) - each suspension resumed by
`portal resume` in a new process, and the output compared with python's.

The verdict of a case:
  pass exact   the output is python's, byte for byte;
  pass named   it differs, and the suspension printed a `will differ:` line that
               mentions one of the idiom's `# corpus-names:` (as a whole word);
  FAIL silent  it differs and no such line: the idiom, the point and the first
               line that differs are named;
  decline      the job was not rescued (`portal: not rescued: ...`): a failure
               too, the job of an ordinary idiom is lost;
  pass declined  a decline the idiom declares at that point (`# corpus-declines:
               POINT: WORDS`), whose reason holds WORDS: a known limit, stated in
               docs/fidelity.md, that the program is told of by name; a decline
               anywhere else, or for another reason, is still a failure.
The idioms' files print everything they wrote (event files, logs, database rows)
at their end, so their output is the whole comparison.

The cases run side by side (CORPUS_JOBS, default: the machine's cores, at most 4),
started when the first test asks for its result; python runs each idiom once.
"""
import concurrent.futures
import dataclasses
import functools
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import PYTHON, store_env
from real_oom_cases import PAST_THE_CAP, REFUSED

HERE = Path(__file__).resolve().parent / "idioms_corpus"
PORTAL_RUN = os.environ.get("PORTAL_RUN") or shutil.which("portal-run")
PORTAL = os.environ.get("PORTAL") or str(Path(PORTAL_RUN).with_name("portal"))
TIMEOUT = 180
SUSPENDED = 75
MEM = "1G"             # the real shortage's cap; corpus.grow() passes it
RESUME_MEM = "8G"

MARKER = re.compile(r"#\s*corpus:\s*(before|inside|after|real)@(\d+)(?:=(\w+))?\s*$")
NAMES = re.compile(r"^#\s*corpus-names:\s*(.+)$", re.M)
DECLINES = re.compile(r"^#\s*corpus-declines:\s*(before|inside|after|real):\s*(.+)$", re.M)
WILL_DIFFER = "portal: suspended: will differ: "
POINTS = ("before", "inside", "after", "real")


@dataclasses.dataclass(frozen=True)
class Case:
    idiom: str           # the file, `kmeans.py`
    point: str           # before, inside, after, real
    line: int
    hit: int
    kind: str            # the fake's kind; "" for the real shortage

    @property
    def id(self):
        return f"{self.idiom[:-3]}-{self.point}"

    def describe(self):
        where = f"{self.idiom}:{self.line}, its start #{self.hit}"
        if self.point == "real":
            return f"a real shortage under --mem {MEM} at {where}"
        return f"a fake out-of-memory error ({self.kind}) {self.point} the main computation at {where}"


def idioms() -> List[str]:
    return sorted(p.name for p in HERE.glob("*.py") if p.name != "corpus.py")


@functools.lru_cache(maxsize=None)
def names_of(idiom: str) -> List[str]:
    found = NAMES.search((HERE / idiom).read_text())
    assert found, f"{idiom} has no `# corpus-names:` line"
    return [n.strip() for n in found.group(1).split(",") if n.strip()]


@functools.lru_cache(maxsize=None)
def declines_of(idiom: str) -> Dict[str, str]:
    """{point: the words its declared decline's reason holds}."""
    return {m.group(1): m.group(2).strip() for m in DECLINES.finditer((HERE / idiom).read_text())}


def cases_of(idiom: str) -> List[Case]:
    found = {}
    for number, text in enumerate((HERE / idiom).read_text().splitlines(), 1):
        m = MARKER.search(text)
        if m:
            point, hit, kind = m.group(1), int(m.group(2)), m.group(3) or ""
            assert point not in found, f"{idiom}: two `# corpus: {point}` markers"
            assert (point == "real") == (kind == ""), f"{idiom}:{number}: a fake needs a kind, the real point none"
            found[point] = Case(idiom, point, number, hit, kind)
    assert sorted(found) == sorted(POINTS), f"{idiom}: markers for {sorted(found)}, not {POINTS}"
    return [found[p] for p in POINTS]


CASES = [case for idiom in idioms() for case in cases_of(idiom)]


# --- running ------------------------------------------------------------------------

def run_env(home: Path, **extra) -> Dict[str, str]:
    # One thread of torch's and numpy's each: the cases run side by side, and
    # python's run is under the same conditions.
    return store_env(home, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", **extra)


def _run(cmd, cwd, env):
    try:
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(cmd, -9, e.stdout or b"", (e.stderr or b"") + b"\n(timed out)")


def fresh_copy(root: Path) -> Path:
    shutil.copytree(HERE, root / "work")
    return root / "work"


@dataclasses.dataclass
class Result:
    verdict: str                  # pass exact, pass named, FAIL silent, decline, error
    detail: str = ""

    @property
    def ok(self):
        return self.verdict.startswith("pass")


def python_run(idiom: str, root: Path) -> bytes:
    work = fresh_copy(root / f"python-{idiom}")
    r = _run([PYTHON, idiom], work, run_env(root / "python-home"))
    assert r.returncode == 0, f"python {idiom} failed ({r.returncode}): {r.stderr.decode(errors='replace')}"
    return r.stdout


def first_difference(expected: bytes, got: bytes) -> str:
    want, have = expected.splitlines(), got.splitlines()
    for i, (a, b) in enumerate(zip(want, have)):
        if a != b:
            return f"line {i + 1}: python {a.decode(errors='replace')!r}, resumed {b.decode(errors='replace')!r}"
    if len(want) != len(have):
        i = min(len(want), len(have))
        extra = (have if len(have) > len(want) else want)[i].decode(errors="replace")
        return (f"line {i + 1}: " + (f"the resumed run has more: {extra!r}" if len(have) > len(want)
                                      else f"the resumed run ended before python's {extra!r}"))
    return "same lines, different bytes"


def run_case(case: Case, expected: bytes, root: Path) -> Result:
    work = fresh_copy(root)
    home = root / "home"
    if case.point == "real":
        cmd = [PORTAL_RUN, "--mem", MEM, case.idiom]
        env = run_env(home, CORPUS_GROW_AT=str(case.hit))
    else:
        cmd = [PORTAL_RUN, case.idiom]
        env = run_env(home, PORTAL_FAKE_OOM=f"{case.idiom}:{case.line}@{case.hit}={case.kind}")
    first = _run(cmd, work, env)
    said = first.stderr.decode(errors="replace")
    if first.returncode != SUSPENDED:
        if "portal: not rescued" in said:
            reason = [l for l in said.splitlines() if l.startswith("portal: not rescued")]
            reason = reason[-1] if reason else said[-600:]
            words = declines_of(case.idiom).get(case.point)
            if words is not None and words in reason:
                return Result("pass declined", reason)
            return Result("decline", reason)
        if first.returncode == 0:
            return Result("error", "the program ran to its end: the marker's hit is never reached "
                                   "or the cap never bound")
        return Result("error", f"portal-run exited {first.returncode}, not suspended:\n{said[-2000:]}")
    # (a line of its own: a warning of the program's may come before it)
    if case.point == "real" and not any(REFUSED.search(l) or PAST_THE_CAP.search(l)
                                        for l in first.stderr.splitlines()):
        return Result("error", f"suspended, but not by a shortage:\n{said}")
    jobs = sorted(p.name for p in (home / "jobs").iterdir()) if (home / "jobs").is_dir() else []
    if len(jobs) != 1:
        return Result("error", f"{len(jobs)} jobs in the case's own store after the suspension:\n{said}")
    resume = [PORTAL, "resume", jobs[0]] + (["--mem", RESUME_MEM] if case.point == "real" else [])
    second = _run(resume, work, run_env(home))
    if second.returncode != 0:
        return Result("error", f"portal resume exited {second.returncode}:\n"
                               f"{second.stderr.decode(errors='replace')[-2000:]}\nthe suspension said:\n{said}")
    return verdict(expected, first.stdout + second.stdout, said, names_of(case.idiom))


def verdict(expected: bytes, got: bytes, said: str, names: List[str]) -> Result:
    """python's output, the suspended and resumed runs' output, what the
    suspension said on stderr, the idiom's names: the verdict."""
    if got == expected:
        return Result("pass exact")
    differ = [l for l in said.splitlines() if l.startswith(WILL_DIFFER)]
    named = [l for l in differ if any(re.search(r"(?<!\w)" + re.escape(name) + r"(?!\w)", l[len(WILL_DIFFER):])
                                      for name in names)]
    if named:
        return Result("pass named", named[0])
    also = ("; its `will differ:` lines name none of " + ", ".join(names) + ": " + " | ".join(differ)) if differ else ""
    return Result("FAIL silent", f"{first_difference(expected, got)}{also}")


# --- the cases, side by side ----------------------------------------------------------

class Runner:
    """Runs the selected cases in a pool; python's run of an idiom once, first."""

    def __init__(self, selected: List[Case]):
        self.root = Path(tempfile.mkdtemp(prefix="portal-idioms-corpus-"))
        jobs = int(os.environ.get("CORPUS_JOBS") or min(4, os.cpu_count() or 1))
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs))
        self.python = {idiom: self.pool.submit(python_run, idiom, self.root)
                       for idiom in sorted({c.idiom for c in selected})}
        self.results = {c: self.pool.submit(self._case, c) for c in selected}

    def _case(self, case: Case) -> Result:
        expected = self.python[case.idiom].result()
        return run_case(case, expected, self.root / case.id)

    def result(self, case: Case) -> Result:
        return self.results[case].result()

    def close(self):
        self.pool.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="module")
def runner(request):
    selected = [item.callspec.params["case"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec")]
    r = Runner(selected)
    yield r
    table = []
    for case, future in r.results.items():
        outcome = future.result() if future.done() and not future.cancelled() else Result("not run")
        table.append(f"  {case.id:28} {outcome.verdict:12} {outcome.detail[:150]}".rstrip())
    r.close()
    # The table of verdicts, on the terminal (past pytest's capture of the teardown).
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line("")
            reporter.write_line("idioms corpus, idiom-point: verdict")
            for row in table:
                reporter.write_line(row)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_suspended_idiom_resumes_as_python_ran_it_or_names_what_differs(runner, case):
    outcome = runner.result(case)
    assert outcome.ok, f"{case.idiom}, {case.describe()}: {outcome.verdict}: {outcome.detail}"


def test_every_idiom_marks_its_points_and_names():
    """The corpus itself: each idiom marks its four points by comments (a line it
    really runs: a hit the run never reaches is an `error` verdict above) and
    names what its failed iteration may change."""
    assert len(idioms()) >= 14
    for idiom in idioms():
        assert len(cases_of(idiom)) == 4 and names_of(idiom)


def test_the_verdict_passes_only_python_s_output_or_a_difference_named():
    """The harness's own rule, on made-up runs: a difference passes only with a
    `will differ:` line naming one of the idiom's names as a whole word."""
    py = b"0 a\n1 b\n2 c\n"
    assert verdict(py, py, "", ["counts"]).verdict == "pass exact"
    other = b"0 a\n1 B\n2 c\n"
    named = WILL_DIFFER + "the failed iteration may already have changed 'counts' (k.py:9)"
    assert verdict(py, other, f"portal: suspended: x\n{named}\n", ["rng", "counts"]).verdict == "pass named"
    silent = verdict(py, other, "portal: suspended: x\nportal: suspended: the error came from ...counts\n",
                     ["counts"])
    assert silent.verdict == "FAIL silent" and silent.detail == "line 2: python '1 b', resumed '1 B'"
    elsewhere = verdict(py, other, WILL_DIFFER + "optimizer 'opt' (step 3): it will step again\n", ["op", "optim"])
    assert elsewhere.verdict == "FAIL silent" and "name none of op, optim: " + WILL_DIFFER in elsewhere.detail
    assert verdict(py, other, WILL_DIFFER + "the gradients of 'discounts'\n", ["counts"]).verdict == "FAIL silent"
    assert verdict(py, py + b"3 d\n", "", []).detail == "line 4: the resumed run has more: '3 d'"
    assert verdict(py, py[:-4], "", []).detail == "line 3: the resumed run ended before python's '2 c'"
