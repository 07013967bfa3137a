"""Kill at random (issue 25, item 4): SIGKILL of `portal-run`, of `portal resume`
or of the program at a random moment of each phase of a job's life, then the job
carried on to its end, counting

  lost      a job whose checkpoint `portal inspect` finds sound but that `portal
            resume` refuses, or that then does not end with python's result;
  double    an iteration run twice beyond the failed one: two programs of the job
            alive at once, or a resume that does not start at the iteration of
            the job's newest committed checkpoint;
  orphans   a process of the job (supervisor or program) left alive once the
            supervisor we started has ended.

The phases: `run` (the first run, no checkpoint yet), `suspend` (during the write
of the checkpoint of a preemption, SIGTERM's, of the first run or of a resumed
one: the kill lands between the write's start and a little after its commit),
`resume` (during the restore and after it, while the resumed program runs).
Each trial is seeded; the seed is printed.  Used by test_kill_random.py (a few
trials per phase, in CI) and, as a script, by scripts/kill-random-stress.sh
(50 per phase):

    PORTAL_RUN=build/bin/portal-run /usr/bin/python3 tests/e2e/kill_random.py --trials 50
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROGRAM = HERE / "kill_random" / "counter.py"
ITERATIONS, STATE_MIB, STEP = 14, 48, 0.06
PHASES = ("run", "suspend", "resume")
TARGETS = ("supervisor", "program")
SUSPENDED = 75
TIMEOUT = 120


def tools():
    run = os.environ.get("PORTAL_RUN") or shutil.which("portal-run")
    if not run:
        raise SystemExit("kill_random: set PORTAL_RUN to the built portal-run")
    run = os.path.abspath(run)
    portal = os.environ.get("PORTAL") or str(Path(run).with_name("portal"))
    python = os.environ.setdefault("PORTAL_PYTHON", "/usr/bin/python3")
    return run, portal, python


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def processes_of(home):
    """{pid: (exe, ppid, argv)} of every process started with PORTAL_HOME=home."""
    marker = b"PORTAL_HOME=" + str(home).encode()
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        environ = _read(f"/proc/{name}/environ")
        if not environ or marker not in environ.split(b"\0"):
            continue
        stat = _read(f"/proc/{name}/stat") or b""
        fields = stat[stat.rfind(b")") + 2:].split()
        if fields and fields[0] == b"Z":
            continue   # a zombie, its parent about to reap it: nothing runs
        try:
            exe = os.readlink(f"/proc/{name}/exe")
        except OSError:
            continue
        argv = (_read(f"/proc/{name}/cmdline") or b"").split(b"\0")
        found[int(name)] = (exe, int(fields[1]) if len(fields) > 1 else 0, argv)
    return found


def is_program(exe, argv, python_exe):
    """Whether the process runs the job's program: the interpreter with Portal's
    bootstrap and its arguments (`python -c BOOT MODE ...`), not the interpreter
    probe a supervisor runs first (`python -c PROBE`)."""
    return exe == python_exe and len([a for a in argv if a]) >= 4


class Output:
    """A process's stdout and stderr, read by threads as they come."""

    def __init__(self, proc):
        self.proc, self.out, self.err = proc, bytearray(), bytearray()
        self.threads = [threading.Thread(target=self._pump, args=(proc.stdout, self.out), daemon=True),
                        threading.Thread(target=self._pump, args=(proc.stderr, self.err), daemon=True)]
        for t in self.threads:
            t.start()

    @staticmethod
    def _pump(stream, into):
        for chunk in iter(lambda: stream.read1(65536), b""):
            into += chunk

    def wait(self):
        code = self.proc.wait(timeout=TIMEOUT)
        for t in self.threads:
            t.join(timeout=10)
        return code


class Trial:
    def __init__(self, root, seed, phase, target, expected, counts, say):
        self.run_tool, self.portal, self.python = tools()
        self.rng = random.Random(seed)
        self.seed, self.phase, self.target = seed, phase, target
        self.expected, self.counts, self.say = expected, counts, say
        self.dir = Path(tempfile.mkdtemp(prefix=f"{phase}-{target}-", dir=root))
        self.work, self.home = self.dir / "work", self.dir / "home"
        self.work.mkdir()
        shutil.copy(PROGRAM, self.work / "counter.py")
        self.log = self.dir / "iterations.log"
        self.env = dict(os.environ, PORTAL_HOME=str(self.home))
        for name in ("PORTAL_POLICY", "PORTAL_FAKE_OOM"):
            self.env.pop(name, None)
        self.python_exe = os.path.realpath(self.python)
        self.sampling = False
        self.job = None

    # --- processes -----------------------------------------------------------------------------

    def programs(self):
        """The interpreters a supervisor of this trial runs (the job's programs)."""
        procs = processes_of(self.home)
        out = []
        for pid, (exe, ppid, argv) in procs.items():
            parent = procs.get(ppid)
            if is_program(exe, argv, self.python_exe) and parent is not None and (
                    parent[0] == self.run_tool or parent[2][1:2] == [b"resume"]):
                out.append(pid)
        return out

    def _sample(self):
        while self.sampling:
            if len(self.programs()) > 1:
                self.counts["double"] += 1
                self.say(f"  double: two programs of job {self.job} at once")
                return
            time.sleep(0.01)

    def start(self, argv):
        proc = subprocess.Popen(argv, cwd=self.work, env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        return Output(proc)

    def start_run(self):
        return self.start([self.run_tool, "counter.py", str(ITERATIONS), str(STATE_MIB), str(STEP),
                           str(self.log)])

    def job_dir(self):
        jobs = self.home / "jobs"
        names = sorted(p.name for p in jobs.iterdir()) if jobs.is_dir() else []
        if names:
            self.job = names[-1]
        return jobs / self.job if self.job else None

    def child_of(self, supervisor, deadline):
        while time.monotonic() < deadline:
            for pid, (exe, ppid, argv) in processes_of(self.home).items():
                if ppid == supervisor and is_program(exe, argv, self.python_exe):
                    return pid
            time.sleep(0.005)
        return None

    def kill(self, output):
        """SIGKILL of the trial's target: the supervisor (portal-run, portal resume) or its program."""
        pid = output.proc.pid
        if self.target == "program":
            pid = self.child_of(pid, time.monotonic() + 5)
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def end(self, output):
        """Waits for the supervisor, then for every process of the job: those alive
        3 s later are orphans (counted, then killed)."""
        code = output.wait()
        deadline = time.monotonic() + 3
        while processes_of(self.home) and time.monotonic() < deadline:
            time.sleep(0.02)
        left = processes_of(self.home)
        if left:
            self.counts["orphans"] += len(left)
            self.say(f"  orphans: {sorted(left)} of job {self.job}")
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        return code

    # --- the job ---------------------------------------------------------------------------

    def checkpoint_iteration(self):
        """The loop iteration of the job's committed checkpoint, or None."""
        directory = self.job_dir()
        raw = _read(directory / "checkpoint" / "manifest.json") if directory else None
        if raw is None:
            return None
        try:
            return json.loads(raw)["loop"]["iteration"]
        except (ValueError, KeyError, TypeError):
            return None

    def sound(self):
        if self.job_dir() is None:
            return False
        return subprocess.run([self.portal, "inspect", self.job], env=self.env, capture_output=True,
                              timeout=TIMEOUT).returncode == 0

    def logged(self):
        lines = []
        for line in (_read(self.log) or b"").decode(errors="replace").splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                lines.append((int(parts[0]), int(parts[1])))
        return lines

    def resume(self, kill_after=None, term_after=None):
        """`portal resume JOB`, SIGKILLed after `kill_after` s or sent SIGTERM after
        `term_after` s; checks that the program starts at the checkpoint's iteration."""
        at = self.checkpoint_iteration()
        before = len(self.logged())
        output = self.start([self.portal, "resume", self.job])
        if kill_after is not None:
            time.sleep(kill_after)
            self.kill(output)
        elif term_after is not None:
            time.sleep(term_after)
            output.proc.send_signal(signal.SIGTERM)
        code = self.end(output)
        new = self.logged()[before:]
        if new and at is not None and new[0][1] != at:
            self.counts["double"] += 1
            self.say(f"  double: resumed at iteration {new[0][1]}, its checkpoint's is {at}")
        return code, output

    def suspended_job(self):
        """A run preempted (SIGTERM) at a random moment of its loop: 75 with a checkpoint."""
        for _ in range(5):
            output = self.start_run()
            time.sleep(self.rng.uniform(0.4, 0.4 + ITERATIONS * STEP * 0.5))
            output.proc.send_signal(signal.SIGTERM)
            if self.end(output) == SUSPENDED:
                self.job_dir()
                return True
            shutil.rmtree(self.home, ignore_errors=True)
            self.log.unlink(missing_ok=True)
        return False

    def kill_in_write(self, output):
        """SIGTERM, then SIGKILL at a random moment from the start of the checkpoint
        write (its temporary directory appears) to a little after its commit."""
        output.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        directory = None
        while time.monotonic() < deadline and output.proc.poll() is None:
            directory = directory or self.job_dir()
            if directory is not None and any(p.name.startswith(".checkpoint.tmp-") for p in directory.iterdir()):
                break
            time.sleep(0.002)
        time.sleep(self.rng.uniform(0.0, 0.6))
        self.kill(output)

    def run_phase(self):
        if self.phase == "run":
            output = self.start_run()
            time.sleep(self.rng.uniform(0.0, 0.3 + ITERATIONS * STEP))
            self.kill(output)
            self.end(output)
        elif self.phase == "suspend":
            if self.rng.random() < 0.5:
                output = self.start_run()             # the first checkpoint
                time.sleep(self.rng.uniform(0.4, 0.4 + ITERATIONS * STEP * 0.4))
            else:                                     # a newer one, the older one committed
                if not self.suspended_job():
                    return self.say("  no suspension in 5 tries")
                output = self.start([self.portal, "resume", self.job])
                time.sleep(self.rng.uniform(0.5, 1.0))
            self.kill_in_write(output)
            self.end(output)
        else:
            if not self.suspended_job():
                return self.say("  no suspension in 5 tries")
            self.resume(kill_after=self.rng.uniform(0.0, 1.5))

    def carry_on(self):
        """The job to its end: resumed while its checkpoint is sound."""
        for _ in range(4):
            directory = self.job_dir()
            record = _read(directory / "job.json") if directory else None
            if record and json.loads(record).get("state") == "completed":
                self.counts["completed"] += 1   # it ended before the kill came
                return
            if not self.sound():
                self.counts["restarted"] += 1   # no checkpoint was committed: nothing to resume
                return
            code, output = self.resume()
            if code == 0:
                if self.expected not in bytes(output.out):
                    self.counts["lost"] += 1
                    self.say(f"  lost: the resumed job ended with {bytes(output.out)[-200:]!r}, not python's result")
                else:
                    self.counts["completed"] += 1
                return
            if b"nothing to resume" in output.err or b"is lost" in output.err or code != SUSPENDED:
                self.counts["lost"] += 1
                self.say(f"  lost: sound checkpoint, resume exit {code}: {bytes(output.err)[-400:]!r}")
                return
        self.counts["lost"] += 1
        self.say("  lost: still suspended after 4 resumes")

    def __call__(self):
        self.sampling = True
        sampler = threading.Thread(target=self._sample, daemon=True)
        sampler.start()
        try:
            self.run_phase()
            self.carry_on()
        finally:
            self.sampling = False
            sampler.join(timeout=5)
            shutil.rmtree(self.dir, ignore_errors=True)


def expected_result(python, root):
    log = Path(root) / "python.log"
    done = subprocess.run([python, str(PROGRAM), str(ITERATIONS), str(STATE_MIB), str(STEP), str(log)],
                          capture_output=True, timeout=TIMEOUT, env=dict(os.environ))
    assert done.returncode == 0, done.stderr.decode()
    [line] = [l for l in done.stdout.splitlines() if l.startswith(b"result ")]
    return line


def run_trials(trials_per_phase, seed, say=print, phases=PHASES):
    """Counts over `trials_per_phase` trials of each phase, targets alternating."""
    _, _, python = tools()
    counts = {"trials": 0, "lost": 0, "double": 0, "orphans": 0, "completed": 0, "restarted": 0}
    with tempfile.TemporaryDirectory(prefix="portal-kill-random-") as root:
        expected = expected_result(python, root)
        rng = random.Random(seed)
        say(f"kill_random: seed {seed}, {trials_per_phase} trials per phase")
        for phase in phases:
            for n in range(trials_per_phase):
                target = TARGETS[n % len(TARGETS)]
                trial_seed = rng.randrange(1 << 32)
                say(f"{phase} trial {n}: SIGKILL of the {target}, seed {trial_seed}")
                Trial(root, trial_seed, phase, target, expected, counts, say)()
                counts["trials"] += 1
    say("kill_random: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=50, help="trials per phase")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--phase", action="append", choices=PHASES)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    counts = run_trials(args.trials, seed, phases=args.phase or PHASES)
    return 1 if counts["lost"] or counts["double"] or counts["orphans"] else 0


if __name__ == "__main__":
    sys.exit(main())
