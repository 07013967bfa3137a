"""Every input checked before use (issue 25, finding 5; docs/cli.md, docs/slurm.md,
docs/policies.md):

- `--preempt-grace nan` and `inf` are refused by portal-run and `portal resume`
  (nan passed a range check, and the preempted program never got its signal);
- 50,000-character values (`--device-map`, `--on slurm:...`, an extra argument, a
  value CLI11 cannot convert) are one `portal:` line and exit 2, never a segfault
  (a regex match recursed per character);
- a script named `-x.py` gets an id that does not start with `-`; the printed
  resume command runs as printed; `show`, `rm` and `resume` take `--` before an id;
- five concurrent `portal resume J --on slurm` submit one Slurm job; the other
  four name it; the batch script puts `--` before the job id;
- a `%` in the store's path reaches sbatch's --output as `%%` (sbatch's filename
  patterns), a backslash (which turns the patterns off) is refused;
- `portal resume J --policy K=V` replaces that key and keeps the job's others;
- oom.max_skips is honoured whatever the count, and the record stays bounded
  (4000 skips made it pass its 1 MiB and become unreadable);
- the suspension's hint names the resource that ran short (`--gpu` for a CUDA
  error), never a --mem below the allocation that failed, and says when the size
  is for another machine.

sbatch, squeue and scontrol are small fakes on PATH here (what reaches sbatch is
what is checked); tests/e2e/test_slurm.py runs a real Slurm.
"""
import json
import math
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import PYTHON, store_env

PORTAL_RUN = os.environ.get("PORTAL_RUN") or shutil.which("portal-run")
PORTAL = os.environ.get("PORTAL") or str(Path(PORTAL_RUN).with_name("portal"))
TIMEOUT = 120
SUSPENDED = 75
USAGE = 2
REFUSED = 1
GIB = 1 << 30
HUGE = 50000

LOOP = """\
import sys
total = 0
for step in range(6):
    total += step * step
    print("step", step, total, flush=True)
print("total", total)
"""
LOOP_OOM_LINE = 4  # `total += step * step`


class Store:
    def __init__(self, root: Path, home_name="home"):
        self.home = root / home_name
        self.work = root / "work"
        self.work.mkdir()
        (self.work / "loop.py").write_text(LOOP)

    def env(self, **extra):
        return store_env(self.home, PORTAL_PYTHON=PYTHON, **extra)

    def run(self, program, *args, cwd=None, env=None, timeout=TIMEOUT):
        return subprocess.run([PORTAL_RUN, *program, *args], cwd=cwd or self.work, capture_output=True,
                              stdin=subprocess.DEVNULL, env=env or self.env(), timeout=timeout)

    def portal(self, *args, env=None, timeout=TIMEOUT):
        return subprocess.run([PORTAL, *args], cwd=self.work, capture_output=True, stdin=subprocess.DEVNULL,
                              env=env or self.env(), timeout=timeout)

    def ids(self):
        jobs = self.home / "jobs"
        return sorted(p.name for p in jobs.iterdir()) if jobs.exists() else []

    def record(self, job):
        return json.loads((self.home / "jobs" / job / "job.json").read_text())

    def suspended_job(self, script="loop.py", line=LOOP_OOM_LINE, hit=3, kind="memory", args=()):
        before = set(self.ids())
        p = self.run(["--", script], *args, env=self.env(PORTAL_FAKE_OOM=f"{script}:{line}@{hit}={kind}"))
        assert p.returncode == SUSPENDED, p.stderr.decode()
        (job,) = set(self.ids()) - before
        return job, p


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path)


def one_portal_line(p):
    """The refusal is one `portal: ...` line, short, with no CLI11 or C++ text."""
    text = p.stderr.decode()
    assert text.count("\n") == 1 and text.startswith("portal: "), text[:2000]
    assert len(text) < 600, text[:2000]
    for foreign in ("Value ", "not in range", "Could not convert", "terminate called", "Segmentation"):
        assert foreign not in text, text
    return text


# --- --preempt-grace --------------------------------------------------------------------

@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e400", "-1", "0x10"])
def test_a_preempt_grace_that_is_not_a_finite_number_of_seconds_is_refused(store, value):
    run = store.run(["--preempt-grace", value, "loop.py"])
    assert run.returncode == USAGE, run.stderr
    text = one_portal_line(run)
    assert text.startswith(f"portal: --preempt-grace {value}: not a number of seconds from 0 to 1000000"), text
    assert not store.ids()  # nothing ran
    job, _ = store.suspended_job()
    resume = store.portal("resume", job, "--preempt-grace", value)
    assert resume.returncode == USAGE, resume.stderr
    assert one_portal_line(resume).startswith(f"portal: --preempt-grace {value}: not a number of seconds"), resume
    assert store.record(job)["state"] == "suspended"


def test_a_finite_preempt_grace_is_taken(store):
    run = store.run(["--preempt-grace", "2.5", "loop.py"])
    python = subprocess.run([PYTHON, "loop.py"], cwd=store.work, capture_output=True, timeout=TIMEOUT)
    assert run.returncode == 0 and run.stdout == python.stdout, run.stderr


# --- huge values --------------------------------------------------------------------------

def test_huge_values_are_refused_in_one_line_never_a_crash(store):
    job, _ = store.suspended_job()
    device_map = ",".join(["0:1"] * (HUGE // 4))
    cases = [
        (["resume", job, "--device-map", device_map], "--device-map", "characters): longer than the 1024 characters"),
        (["resume", job, "--on", "slurm:" + "p" * HUGE], "resume", "a partition name has at most 128 characters"),
        (["resume", job, "--on", "x" * HUGE], "resume", "not supported"),
        (["resume", job, "--mem", "9" * HUGE], "--mem", ""),
        (["logs", job, "--run", "1" * HUGE], "--run", ""),
        (["show", job, "y" * HUGE], "y" * 80 + "... (50000 characters)", "not expected here"),
        (["show", "z" * HUGE], "show", "(50000 characters) is not a job id"),
        (["rm", "z" * HUGE], "rm", "(50000 characters) is not a job id"),
        (["gc", "--older-than", "7" * HUGE], "--older-than", ""),
        (["list", "--state", "s" * HUGE], "--state", ""),
    ]
    for args, subject, problem in cases:
        p = store.portal(*args)
        assert p.returncode in (USAGE, REFUSED), (args[:3], p.returncode, p.stderr[:300])
        text = one_portal_line(p)
        assert text.startswith(f"portal: {subject}"), text
        assert problem in text, text
    run = store.run(["--preempt-grace", "1" * HUGE, "loop.py"])
    assert run.returncode == USAGE and one_portal_line(run).startswith("portal: --preempt-grace 111"), run.stderr
    for option in ("--policy", "--preempt-signal"):
        run = store.run([option, "7" * HUGE, "loop.py"])
        assert run.returncode == USAGE and "... (50000 characters)" in one_portal_line(run), run.stderr[:300]
    run = store.run(["--mem", "1" * HUGE, "loop.py"])
    assert run.returncode == USAGE and one_portal_line(run).startswith("portal: --mem 111"), run.stderr
    assert store.record(job)["state"] == "suspended"


def test_a_device_map_of_the_longest_length_taken_reaches_the_restore(store):
    job, _ = store.suspended_job()
    device_map = "0:0" + ",1:1" * ((1024 - 3) // 4)
    assert len(device_map) <= 1024
    p = store.portal("resume", job, "--device-map", device_map)
    assert p.returncode == 0, p.stderr.decode()[-2000:]


# --- ids never start with "-" -------------------------------------------------------------

def test_a_script_named_like_an_option_gets_an_id_no_command_reads_as_one(store):
    shutil.copy(store.work / "loop.py", store.work / "-x.py")
    job, p = store.suspended_job(script="-x.py")
    assert re.fullmatch(r"x-[0-9a-f]{6}", job), job
    assert not job.startswith("-")
    # The printed command runs as printed.
    [hint] = [l for l in p.stderr.decode().splitlines() if "portal resume" in l and "--mem" in l]
    command = hint[hint.index("portal resume"):].split(" (")[0].split()
    assert command[2] == job, hint
    python = subprocess.run([PYTHON, "--", "-x.py"], cwd=store.work, capture_output=True, timeout=TIMEOUT)
    assert python.returncode == 0
    # `--` before an id is taken by every command that takes one.
    assert store.portal("show", "--", job).returncode == 0
    assert store.portal("logs", "--", job).returncode == 0
    assert store.portal("inspect", "--", job).returncode == 0
    resumed = store.portal("resume", "--mem", "1", "--", job)
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert p.stdout + resumed.stdout == python.stdout
    rm = store.portal("rm", "--", job)
    assert rm.returncode == 0, rm.stderr
    assert store.ids() == []


def test_the_python_side_never_makes_an_id_that_starts_with_a_dash(store):
    code = ("from _portal import job_contract as c; from _portal.store import jobs; import re\n"
            "for name in ['-x.py', '--x.py', '---', '-', '-\\u00e9t\\u00e9.py', 'a-b.py', 'x' * 60 + '.py']:\n"
            "    i = jobs.new_job_id(name)\n"
            "    assert re.fullmatch(c.ID_PATTERN, i) and not i.startswith('-'), (name, i)\n"
            "    print(i[:-7])\n")
    pydir = os.environ.get("PORTAL_PYDIR")
    if not pydir:
        pytest.skip("PORTAL_PYDIR (the staged package) is not set")
    p = subprocess.run([PYTHON, "-c", code], capture_output=True, timeout=TIMEOUT, env=dict(store.env(), PYTHONPATH=pydir))
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout.decode().split() == ["x", "x", "job", "job", "_t_", "a-b", "x" * 32]


# --- Slurm: one submission per job, and the store's path ----------------------------------

FAKE_SBATCH = """\
#!/bin/sh
# A fake sbatch: one numbered call a submission (its arguments one a line, its
# script), a short pause as a real one's round trip, the id printed.
exec 9>>"$FAKE_SLURM/lock"
flock 9
n=$(( $(cat "$FAKE_SLURM/count" 2>/dev/null || echo 4000) + 1 ))
echo "$n" > "$FAKE_SLURM/count"
for a in "$@"; do printf '%s\\n' "$a"; done > "$FAKE_SLURM/args-$n"
cat > "$FAKE_SLURM/script-$n"
flock -u 9
sleep 0.5
echo "$n"
"""
FAKE_SQUEUE = "#!/bin/sh\necho PENDING\n"
# One partition, this host its one node: the store (under /tmp) is not warned about.
FAKE_SCONTROL = "#!/bin/sh\necho \"PartitionName=debug Default=YES TotalNodes=1 Nodes=$(hostname -s)\"\n"


def fake_slurm(root: Path):
    bin_dir = root / "fake-slurm-bin"
    state = root / "fake-slurm"
    bin_dir.mkdir()
    state.mkdir()
    for name, text in (("sbatch", FAKE_SBATCH), ("squeue", FAKE_SQUEUE), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}", "FAKE_SLURM": str(state)}, state


def submissions(state: Path):
    return sorted(state.glob("args-*"))


def test_concurrent_submissions_of_one_job_submit_it_once(tmp_path):
    store = Store(tmp_path)
    job, _ = store.suspended_job()
    extra, state = fake_slurm(tmp_path)
    env = store.env(**extra)
    with ThreadPoolExecutor(5) as pool:
        results = list(pool.map(lambda _: store.portal("resume", job, "--on", "slurm", env=env), range(5)))
    assert len(submissions(state)) == 1, [r.stderr for r in results]
    slurm_id = (state / "count").read_text().strip()
    codes = sorted(r.returncode for r in results)
    assert codes == [0, 1, 1, 1, 1], [r.stderr for r in results]
    for r in results:
        if r.returncode == 0:
            assert r.stdout.decode().strip() == slurm_id
        else:
            assert f"already submitted as Slurm job {slurm_id} (PENDING)" in r.stderr.decode(), r.stderr
    assert store.record(job)["slurm"]["job_id"] == slurm_id
    # The batch script: the id after `--`, never where an option is read.
    script = (state / f"script-{slurm_id}").read_text()
    assert re.search(rf"'resume' '--' '{job}'\n", script), script


def test_a_percent_in_the_store_path_is_not_a_slurm_pattern(tmp_path):
    store = Store(tmp_path, home_name="st%jore%%x")
    job, _ = store.suspended_job()
    extra, state = fake_slurm(tmp_path)
    p = store.portal("resume", job, "--on", "slurm", env=store.env(**extra))
    assert p.returncode == 0, p.stderr
    [args] = submissions(state)
    [output] = [a for a in args.read_text().splitlines() if a.startswith("--output=")]
    # sbatch reads %% as one %: the path it opens is the job's directory.
    job_dir = str(store.home / "jobs" / job)
    assert output == "--output=" + job_dir.replace("%", "%%") + "/slurm-%j.out", output
    assert output.replace("%%", "\0").replace("%j", "4001").replace("\0", "%") == \
        f"--output={job_dir}/slurm-4001.out"
    assert store.record(job)["slurm"]["output"] == f"{job_dir}/slurm-4001.out"


def test_a_backslash_in_the_store_path_is_refused_for_slurm(tmp_path):
    store = Store(tmp_path, home_name="st\\ore")
    job, _ = store.suspended_job()
    extra, state = fake_slurm(tmp_path)
    p = store.portal("resume", job, "--on", "slurm", env=store.env(**extra))
    assert p.returncode == REFUSED, p.stderr
    text = one_portal_line(p)
    assert "holds a backslash" in text and "the job stays suspended" in text, text
    assert submissions(state) == []
    assert store.record(job)["state"] == "suspended"


# --- --policy at resume: that key replaced, the others kept ---------------------------------

ITEMS = """\
import random
random.seed(7)
LEAVE_OUT = {int(x) for x in __import__("sys").argv[1:]}
for i in range(10):
    r = random.random()
    if i in LEAVE_OUT:
        continue
    value = round(i * r, 9)
    print("item", i, value, flush=True)
"""
ITEMS_WORK_LINE = 8  # `value = round(i * r, 9)`
ITEMS_DRAW_LINE = 5  # `r = random.random()`


def test_a_resumes_policy_replaces_that_key_and_keeps_the_others(store):
    (store.work / "items.py").write_text(ITEMS)
    # item 2 fails after its draw (skipped); item 6 before its own (one skip too many:
    # suspended, so that the resumed iteration draws as python does); item 7 after
    # its draw, in the resumed run (the work line's 8th start)
    fake = f"items.py:{ITEMS_WORK_LINE}@3,items.py:{ITEMS_DRAW_LINE}@7,items.py:{ITEMS_WORK_LINE}@8"
    run = store.run(["--policy", "oom.action=skip", "--policy", "oom.max_skips=1", "items.py"],
                    env=store.env(PORTAL_FAKE_OOM=fake))
    assert run.returncode == SUSPENDED, run.stderr.decode()   # the second skip was one too many
    [job] = store.ids()
    resumed = store.portal("resume", job, "--policy", "oom.max_skips=5")
    # oom.action=skip kept: item 7 is skipped, not suspended for
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert "(skip 2 of at most 5)" in resumed.stderr.decode(), resumed.stderr
    python = subprocess.run([PYTHON, "items.py", "2", "7"], cwd=store.work, capture_output=True, timeout=TIMEOUT)
    assert run.stdout + resumed.stdout == python.stdout
    assert store.record(job)["policies"] == {"oom.action": "skip", "oom.max_skips": "5"}


# --- oom.max_skips: honoured, and the record bounded -----------------------------------------

FAILING = """\
import sys
done = 0
for i in range(int(sys.argv[1])):
    if i % 2 == 0:
        raise MemoryError("item %d: " % i + "x" * 5000)
    done += 1
print("done", done)
"""


def test_max_skips_is_honoured_and_the_record_stays_small(store):
    (store.work / "failing.py").write_text(FAILING)
    items, limit = 600, 260   # 300 failing items of 5 KiB each: the old list passed 1 MiB
    run = store.run(["--policy", "oom.action=skip", "--policy", f"oom.max_skips={limit}", "failing.py", str(items)],
                    timeout=600)
    assert run.returncode == SUSPENDED, run.stderr.decode()[-3000:]
    skipped = [l for l in run.stderr.decode().splitlines() if l.startswith("portal: skipped: ")]
    assert len(skipped) == limit
    assert f"(skip {limit} of at most {limit})" in skipped[-1]
    assert f"{limit} items skipped already" in run.stderr.decode()
    [job] = store.ids()
    path = store.home / "jobs" / job / "job.json"
    assert path.stat().st_size < 64 * 1024, path.stat().st_size
    r = store.record(job)
    assert r["state"] == "suspended" and r["skipped_count"] == limit
    assert len(r["skipped"]) == 20 and r["skipped"][-1]["iteration"] == 2 * (limit - 1)
    show = store.portal("show", job)
    assert show.returncode == 0
    assert f"skipped     {limit} items (the last 20 listed)\n" in show.stdout.decode()
    # A resume counts on: the limit is the job's, not the run's.
    resumed = store.portal("resume", job)
    assert resumed.returncode == SUSPENDED
    assert f"{limit} items skipped already" in resumed.stderr.decode(), resumed.stderr.decode()[-2000:]


# --- the hint names what ran short ---------------------------------------------------------

def machine_bytes():
    """This machine's memory as `portal resume --mem` checks it (physical, or the
    memory cgroup's limit when lower)."""
    least = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            least = min(least, int(text))
    return least


def resume_hint(stderr):
    [hint] = [l for l in stderr.decode().splitlines() if l.startswith("portal: suspended: resume it")]
    return hint


def test_a_cuda_shortage_asks_for_a_gpu_not_memory(store):
    job, p = store.suspended_job(kind="cuda")
    hint = resume_hint(p.stderr)
    assert f"portal resume {job} --gpu MODEL" in hint and "--mem" not in hint, hint
    assert store.record(job)["suggested_gpu"] is True
    show = store.portal("show", job).stdout.decode()
    assert f"resume      portal resume {job} --gpu MODEL" in show, show


def test_the_hint_never_asks_for_less_than_the_allocation_that_failed(store):
    failed = 1.9 * GIB
    (store.work / "big.py").write_text(
        "for step in range(3):\n"
        "    if step == 1:\n"
        "        raise MemoryError('Unable to allocate 1.90 GiB for an array with shape (255013683,) "
        "and data type float64')\n"
        "    print('step', step, flush=True)\n")
    run = store.run(["--mem", "1G", "big.py"])
    assert run.returncode == SUSPENDED, run.stderr.decode()
    [job] = store.ids()
    hint = resume_hint(run.stderr)
    gib = int(re.search(r"--mem (\d+)G\b", hint).group(1))   # in GiB, as the error names it
    assert gib * GIB >= 1 * GIB + failed, hint          # what it had, and what failed on top of it
    # and --mem GIB caps the resumed job (less the 10% reserve) above the 768 MiB
    # this one had (--mem 1G) with the 1.90 GiB on top
    assert gib * GIB - max(256 << 20, gib * GIB // 10) >= (768 << 20) + failed, hint
    assert store.record(job)["suggested_mem_gib"] == gib
    if gib * GIB > machine_bytes():
        assert "(this machine has " in hint and "on another one, or with --on slurm)" in hint, hint
    else:
        assert "this machine has" not in hint, hint


def test_a_size_this_machine_refuses_is_said_to_be_for_another(store):
    job, p = store.suspended_job()   # no --mem: the machine's own memory, twice
    hint = resume_hint(p.stderr)
    gib = int(re.search(r"--mem (\d+)G\b", hint).group(1))
    assert gib == store.record(job)["suggested_mem_gib"]
    if gib * GIB > machine_bytes():
        assert hint.endswith(f"--mem {gib}G (this machine has {machine_bytes() / GIB:.1f} GiB: "
                             f"on another one, or with --on slurm)"), hint
        # and indeed this machine refuses it
        refused = store.portal("resume", job, "--mem", str(gib))
        assert refused.returncode == USAGE and "this machine has" in refused.stderr.decode()
        show = store.portal("show", job).stdout.decode()
        assert f"--mem {gib}G (this machine has " in show, show
    else:
        assert "this machine has" not in hint, hint
    assert math.isfinite(gib)


# --- portal list fits its terminal -----------------------------------------------------------

def test_list_cuts_a_long_program_to_columns_and_not_when_piped_without(store):
    code = "x = 0  # " + "a" * 270
    run = store.run(["-c", code])
    assert run.returncode == 0, run.stderr
    piped = store.portal("list", env={k: v for k, v in store.env().items() if k != "COLUMNS"})
    assert piped.returncode == 0 and code in piped.stdout.decode()      # a script reads whole rows
    fitted = store.portal("list", env=store.env(COLUMNS="140"))
    rows = fitted.stdout.decode().splitlines()
    assert len(rows) == 2 and max(len(r) for r in rows) <= 140, rows
    assert "..." in rows[1] and code not in rows[1], rows
