"""The GPU check's harness (tests/gpu/run.sh runs it after the build).

Each check prints one line `portal: gpu check: NAME: pass|FAIL|skipped: ...` and
the whole is written to $OUT/gpu-report.md and gpu-report.json:

  environment     the interpreter, torch, the device, Portal's version line
  no_memory_cap   portal-run's program runs under python's memory limits on a GPU
                  machine (no tripwire cap), and CUDA starts under it
  train_oom       a real torch.OutOfMemoryError in a training loop on the GPU:
                  suspended (exit 75), resumed on the same GPU, its output and its
                  parameters bit for bit those of an uninterrupted python run
  device_map      a job holding STATE MiB of CUDA tensors resumed with
                  --device-map 0:0: every tensor and the CUDA generator's state as
                  they were (the generators are restored after the environment is
                  put back: restore/resume.py pins the map first)
  host_memory     the interpreter's host memory while those tensors are written
                  and read back: bounded chunks, not a host copy of the state
  throughput      the checkpoint's write and read rates against the PCIe copy
                  rates (pageable and pinned) and the disk's, measured in the run

--dry-run (a machine without a GPU): the same programs on the CPU where they mean
something there (train_oom with the CPU allocator's real out-of-memory error;
device_map and host_memory as plumbing with a small state); each GPU-only part
is skipped with a line saying so.  Exit status: 0 when nothing failed.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = os.path.join(HERE, "programs")
SUSPENDED = 75
RESUME_RE = re.compile(r"portal resume (\S+)")
# The whole check stays inside the device tool's 8-minute command (with the build).
BUDGET_SECONDS = 6 * 60
STEP_TIMEOUT = 240
MIB = 1 << 20
# A dry run's state: small, the CPU's memory is the machine's.
DRY_STATE_MIB = 256
WATCH_INTERVAL = 0.02


class Harness:
    def __init__(self, args):
        args.build, args.out = os.path.abspath(args.build), os.path.abspath(args.out)
        self.args = args
        self.dry = args.dry_run
        self.device = "cpu" if self.dry else "cuda"
        self.t0 = time.time()
        self.work = os.path.join(args.out, "work")
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.work)
        self.home = os.path.join(self.work, "home")
        self.portal_run = os.path.join(args.build, "bin", "portal-run")
        self.portal = os.path.join(args.build, "bin", "portal")
        self.results = []
        self.figures = {}
        self.log = open(os.path.join(args.out, "gpu-check.log"), "w")

    # -- running ------------------------------------------------------------------------

    def env(self):
        env = dict(os.environ)
        env.update(PORTAL_HOME=self.home, PORTAL_PYTHON=self.args.python,
                   PYTHONUNBUFFERED="1", CUBLAS_WORKSPACE_CONFIG=":4096:8")
        for name in ("PORTAL_DEVICE_MAP", "PORTAL_FAKE_OOM", "VIRTUAL_ENV"):
            env.pop(name, None)
        return env

    def run(self, cmd, timeout=STEP_TIMEOUT):
        self.log.write(f"$ {' '.join(cmd)}\n")
        p = subprocess.run(cmd, cwd=self.work, env=self.env(), capture_output=True,
                           text=True, timeout=timeout)
        self.log.write(f"[exit {p.returncode}]\n--- stdout\n{p.stdout}--- stderr\n{p.stderr}\n")
        self.log.flush()
        return p

    def streamed(self, cmd, stop_marks=(), timeout=STEP_TIMEOUT):
        """Runs cmd, stamping each stdout line on arrival; watches the host memory of
        its interpreter (the deepest descendant) meanwhile.  (rc, [(t, line)],
        stderr, watch)."""
        self.log.write(f"$ {' '.join(cmd)}\n")
        start = time.time()
        p = subprocess.Popen(cmd, cwd=self.work, env=self.env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        watch = Watch(p.pid)
        watch.start()
        err = []
        t_err = threading.Thread(target=lambda: err.append(p.stderr.read()), daemon=True)
        t_err.start()
        lines = []
        for line in p.stdout:
            lines.append((time.time(), line.rstrip("\n")))
            watch.mark(line.rstrip("\n"))
        rc = p.wait(timeout=timeout)
        end = time.time()
        watch.stop()
        t_err.join()
        stderr = "".join(err)
        self.log.write(f"[exit {rc} after {end - start:.2f}s]\n--- stdout\n" +
                       "".join(f"{t - start:8.3f} {l}\n" for t, l in lines) +
                       f"--- stderr\n{stderr}\n")
        self.log.flush()
        return rc, lines, stderr, watch, start, end

    def result(self, name, status, detail, **figures):
        line = f"portal: gpu check: {name}: {status}: {detail}"
        print(line, flush=True)
        self.results.append({"check": name, "status": status, "detail": detail,
                             "figures": figures})
        self.figures.update({f"{name}.{k}": v for k, v in figures.items()})

    def over_budget(self, name):
        if time.time() - self.t0 > BUDGET_SECONDS:
            self.result(name, "skipped", f"not run: the check's {BUDGET_SECONDS} s budget is spent")
            return True
        return False

    def python(self, code):
        p = self.run([self.args.python, "-c", code])
        return p.stdout.strip() if p.returncode == 0 else f"(failed: {p.stderr.strip()[-200:]})"

    # -- the checks -------------------------------------------------------------------------

    def environment(self):
        facts = {
            "python": self.python("import sys; print(sys.version.split()[0], sys.executable)"),
            "torch": self.python("import torch; print(torch.__version__, 'cuda', torch.version.cuda, "
                                 "'available', torch.cuda.is_available())"),
            "device": self.python("import torch; print(torch.cuda.get_device_name(0) "
                                  "if torch.cuda.is_available() else 'none')"),
            "portal_run": " / ".join(self.run([self.portal_run, "--version"]).stdout.split("\n")).strip(" /"),
            "headers": self.args.headers,
            "build_seconds": self.args.build_seconds,
        }
        ok = self.dry or "available True" in facts["torch"]
        self.result("environment", "pass" if ok else "FAIL",
                    "; ".join(f"{k} {v}" for k, v in facts.items()), **facts)
        return ok

    def no_memory_cap(self):
        arg = [] if self.dry else ["cuda"]
        prog = os.path.join(PROGRAMS, "limits.py")
        py = self.run([self.args.python, prog] + arg)
        pr = self.run([self.portal_run, prog] + arg)
        same = py.returncode == 0 and pr.returncode == 0 and py.stdout == pr.stdout
        limits = {"python": py.stdout.strip().splitlines(), "portal": pr.stdout.strip().splitlines()}
        if self.dry:
            self.result("no_memory_cap", "skipped",
                        "not a GPU machine: Portal's memory cap is on here by design "
                        f"(under python {limits['python']}, under portal-run {limits['portal']})",
                        **limits)
        else:
            self.result("no_memory_cap", "pass" if same else "FAIL",
                        "the same limits as python, CUDA started" if same else
                        f"python {limits['python']} / portal-run {limits['portal']} "
                        f"(exit {pr.returncode}: {pr.stderr.strip()[-300:]})", **limits)

    def train_oom(self):
        prog = os.path.join(PROGRAMS, "train_oom.py")
        steps, at = 8, 3
        oom_file = os.path.join(self.work, "train.oom")
        ref = self.run([self.args.python, prog, self.device, oom_file, str(steps)])
        if ref.returncode != 0:
            return self.result("train_oom", "FAIL", f"python's own run failed: {ref.stderr[-300:]}")
        with open(oom_file, "w") as f:
            f.write(str(at))
        first = self.run([self.portal_run, prog, self.device, oom_file, str(steps)])
        os.unlink(oom_file)
        m = RESUME_RE.search(first.stderr)
        if first.returncode != SUSPENDED or m is None:
            return self.result("train_oom", "FAIL", f"not suspended (exit {first.returncode}): "
                                                    f"{first.stderr.strip()[-400:]}")
        job = m.group(1)
        second = self.run([self.portal, "resume", job])
        want = ref.stdout.splitlines()
        # python's lines alternate `step I rng R`, `step I loss L`: the error's step starts at 2 * at
        k = 2 * at if len(want) > 2 * at and want[2 * at].startswith(f"step {at} rng ") else -1
        got_first, got_second = first.stdout.splitlines(), second.stdout.splitlines()
        ok = (second.returncode == 0 and k >= 0 and got_first[:k + 1] == want[:k + 1]
              and got_first[k + 1:] == ["oom now"] and got_second == want[k:])
        kind = "torch.OutOfMemoryError on CUDA" if not self.dry else "out-of-memory error of the CPU allocator"
        self.result("train_oom", "pass" if ok else "FAIL",
                    f"a real {kind} at step {at} suspended job {job}, resumed bit for bit "
                    f"(loss bits, generator state, parameters: {want[-1]})" if ok else
                    f"resume exit {second.returncode}; want {want[k:]} got {got_second} "
                    f"({second.stderr.strip()[-300:]})", job=job)

    def big_state(self):
        """device_map, host_memory and the throughput figures, from one job."""
        mib = DRY_STATE_MIB if self.dry else self.args.state_mib
        prog = os.path.join(PROGRAMS, "big_state.py")
        oom_file = os.path.join(self.work, "big.oom")
        at = 1
        with open(oom_file, "w") as f:
            f.write(str(at))
        rc, lines, err, watch, start, end = self.streamed(
            [self.portal_run, prog, self.device, oom_file, str(mib)])
        os.unlink(oom_file)
        m = RESUME_RE.search(err)
        if rc != SUSPENDED or m is None:
            return self.result("device_map", "FAIL", f"not suspended (exit {rc}): {err.strip()[-400:]}")
        job = m.group(1)
        before = [l for _, l in lines if l.startswith(f"step {at} ")]
        oom_at = [float(l.split()[2]) for _, l in lines if l.startswith("oom at ")]
        suspend_s = end - oom_at[0] if oom_at else None
        write_rss = watch.growth_after("oom at ")
        record = self.record(job)
        rc2, lines2, err2, watch2, start2, end2 = self.streamed(
            [self.portal, "resume", job, "--device-map", "0:0"])
        after = [(t, l) for t, l in lines2 if l.startswith(f"step {at} ")]
        resume_s = after[0][0] - start2 if after else None
        read_rss = watch2.peak_until(f"step {at} ")
        fields = lambda l: [w for i, w in enumerate(l.split()) if i not in (2, 3)]  # no time stamp
        same = (rc2 == 0 and before and after and fields(before[0]) == fields(after[0][1])
                and lines2[-1][1] == "done")
        record2 = self.record(job)
        what = "CUDA" if not self.dry else "CPU (plumbing only: the map is for CUDA devices)"
        self.result("device_map", "pass" if same else "FAIL",
                    f"{mib} MiB of {what} tensors and the generator's state as before after "
                    f"`portal resume {job} --device-map 0:0`" if same else
                    f"resume exit {rc2}: before {before} after {[l for _, l in after]} "
                    f"({err2.strip()[-300:]})", state_mib=mib, job=job)
        write = record.get("checkpoint_write") or {}
        read = record2.get("checkpoint_read") or {}
        self.figures.update({"state_mib": mib, "suspend_seconds": suspend_s,
                             "resume_to_first_step_seconds": resume_s,
                             "checkpoint_write": write, "checkpoint_read": read,
                             "checkpoint_bytes_on_disk": du(os.path.join(self.home, "jobs", job))})
        # Host memory: growth of the interpreter's resident memory over what it held
        # when the error came (writing), and its peak before the first resumed step
        # (reading), against the state's size; the chunk is torch_state.CUDA_CHUNK_BYTES.
        bounded = write_rss is not None and write_rss["anon_kib"] * 1024 < mib * MIB / 4
        status = "skipped" if self.dry else ("pass" if bounded else "FAIL")
        self.result("host_memory", status,
                    ("on the CPU the tensors are host memory already; " if self.dry else "") +
                    f"writing {mib} MiB: the interpreter's anonymous memory grew "
                    f"{fmt_kib(write_rss and write_rss['anon_kib'])} (resident "
                    f"{fmt_kib(write_rss and write_rss['rss_kib'])}, file pages included) over "
                    f"its {fmt_kib(write_rss and write_rss['base_rss_kib'])} at the error; reading: "
                    f"peak resident {fmt_kib(read_rss and read_rss['rss_kib'])}",
                    write=write_rss, read=read_rss)

    def record(self, job):
        p = self.run([self.portal, "show", job, "--json"])
        try:
            return json.loads(p.stdout)
        except ValueError:
            return {}

    def throughput(self):
        figures = {}
        if not self.dry:
            figures.update(self.pcie())
        figures.update(self.disk())
        write = self.figures.get("checkpoint_write") or {}
        read = self.figures.get("checkpoint_read") or {}
        rate = lambda r: r["bytes"] / r["seconds"] / MIB if r.get("seconds") else None
        figures["checkpoint_write_mib_s"] = rate(write)
        figures["checkpoint_read_mib_s"] = rate(read)
        figures["suspend_seconds"] = self.figures.get("suspend_seconds")
        figures["resume_to_first_step_seconds"] = self.figures.get("resume_to_first_step_seconds")
        limit_w = min(x for x in (figures.get("d2h_pageable_mib_s"), figures.get("disk_write_mib_s")) if x)
        limit_r = min(x for x in (figures.get("h2d_pageable_mib_s"), figures.get("disk_read_mib_s")) if x)
        figures["write_vs_limit"] = figures["checkpoint_write_mib_s"] / limit_w if figures["checkpoint_write_mib_s"] else None
        figures["read_vs_limit"] = figures["checkpoint_read_mib_s"] / limit_r if figures["checkpoint_read_mib_s"] else None
        detail = ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                           for k, v in figures.items())
        self.result("throughput", "skipped" if self.dry else "pass",
                    ("no GPU: PCIe not measured; " if self.dry else "") + detail, **figures)

    def pcie(self):
        code = r"""
import json, time, torch
n = 1 << 30
d = torch.empty(n, dtype=torch.uint8, device="cuda"); d.fill_(7)
out = {}
for pinned in (False, True):
    h = torch.empty(n, dtype=torch.uint8, pin_memory=pinned); h.fill_(1)
    for name, dst, src in (("d2h", h, d), ("h2d", d, h)):
        times = []
        for _ in range(3):
            torch.cuda.synchronize(); t = time.perf_counter()
            dst.copy_(src); torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        out[f"{name}_{'pinned' if pinned else 'pageable'}_mib_s"] = n / sorted(times)[1] / (1 << 20)
print(json.dumps(out))
"""
        p = self.run([self.args.python, "-c", code])
        try:
            return json.loads(p.stdout)
        except ValueError:
            return {"pcie": f"(failed: {p.stderr.strip()[-200:]})"}

    def disk(self, mib=2048):
        """Sequential write (fsync'd) and read of a file beside the job store; the
        read after posix_fadvise(DONTNEED), which may not empty the cache (said)."""
        path = os.path.join(self.work, "disk.bin")
        block = os.urandom(MIB) * 64
        t = time.perf_counter()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        for _ in range(mib // 64):
            os.write(fd, block)
        os.fsync(fd)
        os.close(fd)
        write_s = time.perf_counter() - t
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            dropped = "fadvise(DONTNEED) asked"
        except OSError as e:
            dropped = f"cache not dropped ({e.strerror})"
        t = time.perf_counter()
        while os.read(fd, 64 * MIB):
            pass
        read_s = time.perf_counter() - t
        os.close(fd)
        os.unlink(path)
        return {"disk_write_mib_s": mib / write_s, "disk_read_mib_s": mib / read_s,
                "disk_read_cache": dropped}

    # -- the report --------------------------------------------------------------------------

    def report(self):
        failed = [r for r in self.results if r["status"] == "FAIL"]
        summary = (f"{sum(r['status'] == 'pass' for r in self.results)} passed, "
                   f"{len(failed)} failed, "
                   f"{sum(r['status'] == 'skipped' for r in self.results)} skipped")
        with open(os.path.join(self.args.out, "gpu-report.json"), "w") as f:
            json.dump({"dry_run": self.dry, "summary": summary, "results": self.results,
                       "figures": self.figures, "seconds": time.time() - self.t0},
                      f, indent=1, default=str)
        with open(os.path.join(self.args.out, "gpu-report.md"), "w") as f:
            f.write(f"# Portal GPU check{' (dry run, CPU)' if self.dry else ''}\n\n")
            f.write("| check | status | detail |\n|---|---|---|\n")
            for r in self.results:
                f.write(f"| {r['check']} | {r['status']} | {r['detail'].replace('|', '/')} |\n")
            f.write(f"\n{summary} in {time.time() - self.t0:.0f} s (the build: "
                    f"{self.args.build_seconds} s)\n")
        print(f"gpu-check: {summary}", flush=True)
        return 1 if failed else 0


class Watch(threading.Thread):
    """Polls the resident memory of the deepest process under `pid` (the
    interpreter portal-run execs); `mark(line)` notes what it held when a line of
    the program's output arrived."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.root, self.samples, self.marks, self.done = pid, [], [], False

    def run(self):
        while not self.done:
            s = self.sample()
            if s is not None:
                self.samples.append(s)
            time.sleep(WATCH_INTERVAL)

    def stop(self):
        self.done = True
        self.join()

    def sample(self):
        pid = deepest(self.root)
        try:
            with open(f"/proc/{pid}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            return None
        kib = lambda k: int(status[k].split()[0]) if k in status else None
        rss = kib("VmRSS")
        if rss is None:         # gone (a zombie has no memory)
            return None
        anon = kib("RssAnon")
        return (time.time(), rss, anon if anon is not None else rss)

    def mark(self, line):
        self.marks.append((time.time(), line, self.samples[-1] if self.samples else None))

    def growth_after(self, prefix):
        at = [(t, s) for t, l, s in self.marks if l.startswith(prefix) and s]
        if not at:
            return None
        t0, base = at[0]
        later = [s for s in self.samples if s[0] >= t0]
        if not later:
            return None
        return {"base_rss_kib": base[1], "rss_kib": max(s[1] for s in later) - base[1],
                "anon_kib": max(s[2] for s in later) - base[2]}

    def peak_until(self, prefix):
        at = [t for t, l, _ in self.marks if l.startswith(prefix)]
        until = at[0] if at else time.time()
        before = [s for s in self.samples if s[0] <= until]
        if not before:
            return None
        return {"rss_kib": max(s[1] for s in before), "anon_kib": max(s[2] for s in before)}


def children():
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            out.setdefault(ppid, []).append(int(name))
    return out


def deepest(pid):
    tree = children()
    while tree.get(pid):
        pid = max(tree[pid])
    return pid


def du(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


def fmt_kib(kib):
    return "?" if kib is None else f"{kib / 1024:.1f} MiB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--python", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--headers", default="its own")
    ap.add_argument("--build-seconds", type=int, default=0)
    ap.add_argument("--state-mib", type=int, default=8192)
    ap.add_argument("--dry-run", action="store_true")
    h = Harness(ap.parse_args())
    if h.dry:
        print("portal: gpu check: dry run on the CPU: the GPU parts are skipped, each says so",
              flush=True)
    if h.environment():
        for name, check in (("no_memory_cap", h.no_memory_cap), ("train_oom", h.train_oom),
                            ("device_map", h.big_state), ("throughput", h.throughput)):
            if h.over_budget(name):
                continue
            try:
                check()
            except Exception as e:  # noqa: BLE001 - the report names it, the rest goes on
                h.result(name, "FAIL", f"the harness failed: {type(e).__name__}: {e}")
    return h.report()


if __name__ == "__main__":
    sys.exit(main())
