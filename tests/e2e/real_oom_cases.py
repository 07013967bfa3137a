"""The real out-of-memory matrix (issue 25): each case runs real_oom/grow.py under
python, then under portal-run until it really runs out (no fake), then resumes
the job with `portal resume JOB --mem 8G` in a new process, and compares the
output with python's, byte for byte (its last line is a digest of the final
state).  test_real_oom.py runs each case once (CI); bench/real_oom_stress.py runs
them several times on a loaded machine and counts the jobs lost.

Every value of each dimension is in some case (not the full cross product):
growth by 1, 5, 16 MiB and by >= 64 MiB; torch tensors, numpy arrays, Python lists,
bytes; --mem 512M, 1G, 2G; the resident cap (the default) and the address cap
(PORTAL_MEMORY_TRIPWIRE=address); the job in a memory cgroup without --mem.
"""
import dataclasses
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List, Optional

from conftest import PYTHON, base_env

PROGRAM = Path(__file__).resolve().parent / "real_oom" / "grow.py"
SUSPENDED = 75
RESUME = re.compile(rb"portal resume (\S+) --mem")
# The first line of a suspension by a real shortage: the allocation refused (a
# MemoryError, numpy's subclass of it, torch 1.13's CPU allocator's RuntimeError),
# or resident memory past the cap between two looks of the watcher (the safe point).
REFUSED = re.compile(rb"\Aportal: suspended: (\S*MemoryError\b|RuntimeError: .*can't allocate memory)")
PAST_THE_CAP = re.compile(rb"\Aportal: suspended: out of memory: resident memory passed the memory tripwire's cap")
READ_TIME = re.compile(rb"portal: checkpoint read: \S+ \S+ in \S+ s \(\S+ \S+\)\Z")
SHORT = re.compile(rb"\nportal: suspended: what ran short: ")
CGROUP_BYTES = 1 << 30


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    kind: str            # torch, numpy, list, bytes
    step_mib: int
    total_mib: int
    mem: Optional[str]   # portal-run --mem; None: in a memory cgroup of CGROUP_BYTES
    cap: str             # resident (the default) or address
    program: str = PROGRAM.name   # a script of real_oom/, given KIND STEP_MIB TOTAL_MIB

    def args(self) -> List[str]:
        return [self.program, self.kind, str(self.step_mib), str(self.total_mib)]

    def needs(self) -> Optional[str]:
        return self.kind if self.kind in ("torch", "numpy") else None


CASES = [
    Case("torch_5m_1g_resident", "torch", 5, 1000, "1G", "resident"),   # issue 25's program
    Case("torch_5m_1g_address", "torch", 5, 1000, "1G", "address"),
    Case("numpy_1m_512m_resident", "numpy", 1, 400, "512M", "resident"),
    Case("list_16m_512m_address", "list", 16, 400, "512M", "address"),
    Case("bytes_96m_2g_resident", "bytes", 96, 2400, "2G", "resident"),
    Case("numpy_128m_1g_address", "numpy", 128, 1024, "1G", "address"),
    Case("torch_64m_cgroup_resident", "torch", 64, 1024, None, "resident"),
    Case("list_1m_cgroup_address", "list", 1, 1000, None, "address"),
    # the iteration that runs out has drawn from a module-level numpy Generator first
    Case("numpy_draw_16m_1g_resident", "numpy", 16, 1200, "1G", "resident", "draw_then_grow.py"),
]


@dataclasses.dataclass
class Outcome:
    ok: bool
    why: str = ""          # what went wrong, or the suspension's lines
    lost: bool = False     # no job to resume, or a resume that did not finish it


def importable(module: str) -> bool:
    return subprocess.run([PYTHON, "-c", f"import {module}"], env=base_env(), cwd="/",
                          capture_output=True, timeout=120).returncode == 0


class MemoryCgroup:
    """A memory cgroup of `limit` bytes made for one run and removed after it:
    v2 where the unified hierarchy has the memory controller, else v1.  Raises
    OSError with the reason when none can be made (not root, no controller)."""

    def __init__(self, limit: int, tag: str):
        self.path = None
        v2_root = Path("/sys/fs/cgroup")
        controllers = v2_root / "cgroup.controllers"
        if controllers.exists() and "memory" in controllers.read_text().split():
            path = v2_root / f"portal-real-oom-{tag}-{os.getpid()}"
            path.mkdir()
            self.path = path
            (path / "memory.max").write_text(str(limit))
            if (path / "memory.swap.max").exists():
                (path / "memory.swap.max").write_text("0")
            return
        v1 = None
        for row in Path("/proc/self/cgroup").read_text().splitlines():
            _, names, where = row.split(":", 2)
            if "memory" in names.split(","):
                v1 = Path("/sys/fs/cgroup/memory") / where.lstrip("/")
        if v1 is None or not (v1 / "memory.limit_in_bytes").exists():
            raise OSError("no memory cgroup controller is mounted (v1 or v2)")
        path = v1 / f"portal-real-oom-{tag}-{os.getpid()}"
        path.mkdir()
        self.path = path
        (path / "memory.limit_in_bytes").write_text(str(limit))

    def wrap(self, cmd: List[str]) -> List[str]:
        """`cmd` started inside the group (the shell joins it, then execs)."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs"), *cmd]

    def oom_kills(self) -> int:
        for name in ("memory.events", "memory.oom_control"):
            f = self.path / name
            if f.exists():
                for row in f.read_text().splitlines():
                    key, _, value = row.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        return 0

    def remove(self):
        if self.path is not None:
            try:
                self.path.rmdir()
            except OSError:
                pass
            self.path = None


def cgroup_unavailable() -> Optional[str]:
    """Why a memory cgroup cannot be made here, or None."""
    try:
        group = MemoryCgroup(CGROUP_BYTES, "probe")
    except OSError as error:
        return f"no memory cgroup can be made here: {error}"
    group.remove()
    return None


def _run(cmd, cwd, env, timeout):
    try:
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(cmd, -1, e.stdout or b"", (e.stderr or b"") + b"\n(timed out)")


def python_output(case: Case, workdir: Path, timeout: float) -> bytes:
    corpus = _corpus(workdir)
    r = _run([PYTHON, *case.args()], corpus, base_env(), timeout)
    if r.returncode != 0:
        raise AssertionError(f"python itself failed ({r.returncode}): {r.stderr.decode(errors='replace')}")
    return r.stdout


def _corpus(workdir: Path) -> Path:
    root = workdir / "real_oom"
    root.mkdir(parents=True, exist_ok=True)
    for program in PROGRAM.parent.glob("*.py"):
        shutil.copy(program, root / program.name)
    return root


def run_case(case: Case, expected: bytes, portal_run: str, portal_cli: str, workdir: Path,
             timeout: float = 240) -> Outcome:
    """Suspend the case by a real shortage, resume it, compare with `expected`
    (python's output)."""
    corpus = _corpus(workdir)
    home = workdir / "home"
    env: Dict[str, str] = base_env({"PORTAL_HOME": str(home)})
    if case.cap == "address":
        env["PORTAL_MEMORY_TRIPWIRE"] = "address"
    cmd = [portal_run, *(["--mem", case.mem] if case.mem else []), *case.args()]
    group = None
    if case.mem is None:
        group = MemoryCgroup(CGROUP_BYTES, case.name)
        cmd = group.wrap(cmd)
    try:
        capped = _run(cmd, corpus, env, timeout)
        killed = group.oom_kills() if group is not None else 0
    finally:
        if group is not None:
            group.remove()
    err = capped.stderr.decode(errors="replace")
    if capped.returncode != SUSPENDED:
        why = f"portal-run exited {capped.returncode}, not suspended"
        if killed:
            why += f" (the cgroup's OOM killer killed {killed})"
        return Outcome(False, f"{why}:\n{err}", lost=True)
    if not (REFUSED.search(capped.stderr) or PAST_THE_CAP.search(capped.stderr)):
        return Outcome(False, f"suspended, but not by a shortage:\n{err}")
    if REFUSED.search(capped.stderr) and not SHORT.search(capped.stderr):
        return Outcome(False, f"the suspension does not say what ran short:\n{err}")
    last = expected.splitlines()[-2]          # the last step's line: the cap bound before it
    if last in capped.stdout.splitlines():
        return Outcome(False, "the program ran to its last step: the cap did not bind")
    job = RESUME.search(capped.stderr)
    if job is None:
        return Outcome(False, f"no resume command in:\n{err}", lost=True)
    resumed = _run([portal_cli, "resume", job.group(1).decode(), "--mem", "8G"], workdir, env, timeout)
    if resumed.returncode != 0:
        return Outcome(False, f"portal resume exited {resumed.returncode}:\n"
                              f"{resumed.stderr.decode(errors='replace')}", lost=True)
    # Nothing but the program's own output; a long read says how long it took.
    said = [l for l in resumed.stderr.splitlines() if l and not READ_TIME.match(l)]
    if said:
        return Outcome(False, f"portal resume said more than python would:\n"
                              f"{resumed.stderr.decode(errors='replace')}")
    if capped.stdout + resumed.stdout != expected:
        got = (capped.stdout + resumed.stdout).splitlines()[-1:]
        return Outcome(False, f"output differs from python's: last line {got} vs "
                              f"{expected.splitlines()[-1:]}", lost=True)
    return Outcome(True, "\n".join(l for l in err.splitlines() if "suspended:" in l)[:600])
