#!/usr/bin/python3
"""Checkpoint I/O of Portal against dd and torch.save/torch.load, measured in one run.

    /usr/bin/python3 bench/checkpoint_io.py [--size-mib 2048] [--repeats 3] [--dir DIR]

A model-like state of CPU tensors (an nn.Module with an embedding tied to the
output layer, linear layers, a buffer, gradients, an Adam optimizer with its
moments, views sharing storage, a few plain Python objects) of about --size-mib
MiB of live tensor bytes is written and read back by:

  portal   python/_portal/checkpoint/write.py write_checkpoint, read.py read_checkpoint
  torch    torch.save to a file + flush + fsync / torch.load
  dd       dd if=/dev/zero bs=16M conv=fsync of the same number of bytes as the
           checkpoint, into the same directory (write only)

Every writer and reader runs in a fresh subprocess that builds (or loads) the
state itself, so memory figures are those of one process.  Repetitions are
interleaved and the order rotates, so drifts of the machine hit every runner.
Reported (medians of the repetitions):

  write throughput   portal / dd                     target >= 0.8
  write throughput   portal / torch.save             target >= 1.0
  peak extra memory  VmHWM during the write minus VmRSS before it (the peak is
                     reset through /proc/self/clear_refs first), beyond the
                     size of state.pickle (the in-band, non-tensor objects)
                                                     target < 64 MiB
  restore            torch.load time / portal time   target >= 1.3, cold and
                     warm, to usable tensors: the load plus a write to every
                     page of every storage (what the first training step does)
  restore vs dd      portal's cold restore throughput / dd's sequential read
                     of a file as big, its pages evicted   target >= 0.9
                     (and, for information, against the same dd read started
                     at once after the eviction, against it with
                     iflag=direct (no page cache), and against dd reading the
                     checkpoint's own files right after Portal did, evicted
                     again: on a virtual disk the host's cache serves a file
                     just written faster than an older one)
  size               checkpoint bytes / live tensor bytes   target <= 1.05

Then, through portal-run and portal (build/bin, or $PORTAL_RUN and $PORTAL), for
each --scale-mib state of dense bytes: the time from the (fake) out-of-memory
error to portal-run's exit (suspend), and from starting `portal resume` (the
checkpoint's pages evicted) to the first resumed iteration, beside dd's write
and read of as many bytes; and a sparse run (--sparse-mib of untouched
np.zeros, 16 MiB touched): its checkpoint's stored bytes (blocks on disk) /
touched bytes, target <= 1.05.

Reads are measured cold (the files' pages evicted from the page cache with
posix_fadvise(DONTNEED) after they were written and fsynced, which needs no
root; --drop-caches uses /proc/sys/vm/drop_caches instead; every cold reader,
dd's too, starts SETTLE_S after the eviction, once the memory it freed has gone
back to the virtual machine's host: see evict) and warm (every
page of the files read into the page cache first, by a plain read of each:
Portal's cold read bypasses the page cache with O_DIRECT, so without it a
"warm" restore after a cold one would read the disk again), the warm reader too
starting SETTLE_S after that read, so that neither reader of a pair inherits
the memory the other has just freed.

Exit status: 0 (it is a benchmark); with --check, 1 if a target is missed; 2 if
a run crashed or a reader restored different tensors.  See docs/benchmarks.md.
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
import types

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH_DIR)
PYTHON = "/usr/bin/python3"
MIB = 1 << 20
DD_BLOCK = 16 * MIB
SETTLE_S = 6.0                # before every read: after an eviction, or a warm-up (see evict)

TARGET_VS_DD = 0.8
TARGET_VS_TORCH_SAVE = 1.0
TARGET_EXTRA_MIB = 64
TARGET_RESTORE = 1.3          # torch.load's time / Portal's, cold and warm
TARGET_VS_DD_READ = 0.9       # Portal's cold restore throughput / dd's sequential read
TARGET_SPARSE = 1.05          # stored bytes of a sparse checkpoint / its touched bytes
TARGET_SIZE = 1.05


class Crash(Exception):
    """A run failed or restored the wrong tensors: the figures would be meaningless."""


# ---------------------------------------------------------------------------
# the state (built in the children)

def model_class():
    """The model's class, defined at module level as ``Model`` so that pickles
    (torch's and Portal's) name it ``__main__.Model`` in every child."""
    if "Model" in globals():
        return globals()["Model"]
    from torch import nn
    import torch

    class Model(nn.Module):
        def __init__(self, vocab, dim, hidden):
            super().__init__()
            self.embed = nn.Embedding(vocab, dim)
            self.layers = nn.ModuleList()
            for h in hidden:                               # two linears per share
                self.layers.append(nn.Linear(dim, h))
                self.layers.append(nn.Linear(h, dim, bias=False))
            self.norm = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, vocab, bias=False)
            self.head.weight = self.embed.weight            # tied: shared Parameter
            self.register_buffer("running", torch.zeros(dim, 64))

    Model.__qualname__ = "Model"
    globals()["Model"] = Model
    return Model


def build_state(size_bytes):
    """A training-like state of about ``size_bytes`` live tensor bytes.

    Parameters, their gradients and Adam's two moments are four equal shares, so
    the parameters get a quarter: an embedding (tied to the output layer: one
    Parameter, written once), linear layers of several sizes, biases, a buffer.
    """
    import torch
    from torch import nn

    torch.manual_seed(0)
    n_params = max(size_bytes // 4 // 4, 1 << 16)      # float32 elements
    dim = 1024
    vocab = max(int(n_params * 0.40) // dim, 1)
    hidden = [max(int(n_params * share) // dim, 1) for share in (0.15, 0.09, 0.04, 0.02)]

    with torch.no_grad():
        model = model_class()(vocab, dim, hidden)
    params = [p for p in model.parameters()]
    opt = torch.optim.Adam(params, lr=1e-3)
    block = torch.randint(0, 256, (4 * MIB,), dtype=torch.uint8)

    def fill(t, salt):
        # Random-looking bytes, cheaply: a random block, rolled per tensor.
        u8 = t.detach().view(-1).view(torch.uint8)
        src = block.roll(salt * 4099)
        for start in range(0, u8.numel(), src.numel()):
            n = min(src.numel(), u8.numel() - start)
            u8[start:start + n].copy_(src[:n])
        # keep floats finite: clear the exponent's top bit of float32 words
        t.detach().view(-1).view(torch.int32).bitwise_and_(0x3FFFFFFF)

    salt = 0
    for p in params:
        fill(p, salt)
        p.grad = torch.empty_like(p)
        fill(p.grad, salt + 1)
        opt.state[p] = {"step": torch.tensor(1000.0),
                        "exp_avg": torch.empty_like(p), "exp_avg_sq": torch.empty_like(p)}
        fill(opt.state[p]["exp_avg"], salt + 2)
        fill(opt.state[p]["exp_avg_sq"], salt + 3)
        salt += 4
    fill(model.running, salt)
    emb = model.embed.weight
    state = {
        "model": model,
        "optimizer": opt,
        "views": {                                 # sharing storage with the model
            "first_rows": emb.detach()[:16],
            "column": emb.detach()[:, 3],           # non-contiguous
            "running_t": model.running.t(),
        },
        # torch.save drops a Parameter's .grad; listing the gradients makes both
        # writers save the same tensors (Portal saves each storage once anyway)
        "grads": [p.grad for p in params],
        "epoch": 3, "step": 1234,
        "losses": [1.0 / (i + 1) for i in range(1000)],
        "config": {"lr": 1e-3, "dim": dim, "vocab": vocab, "hidden": hidden,
                   "name": "bench"},
    }
    return state


def storages(state):
    """{data_ptr: uint8 tensor over the whole storage} of every tensor in ``state``."""
    import torch
    found = {}

    def add(t):
        if t is None:
            return
        s = t.storage().untyped()
        if s.data_ptr() not in found:
            found[s.data_ptr()] = torch.empty(0, dtype=torch.uint8).set_(s)

    model, opt = state["model"], state["optimizer"]
    for p in model.parameters():
        add(p)
    for g in state["grads"]:
        add(g)
    for b in model.buffers():
        add(b)
    for per_param in opt.state.values():
        for v in per_param.values():
            if isinstance(v, torch.Tensor):
                add(v)
    for v in state["views"].values():
        add(v)
    return found


def fingerprint(state):
    """Values that tell whether a restore got every tensor right: per named
    tensor, shape and a sum over a sample of its elements; sharing of storage."""
    import torch
    model, opt = state["model"], state["optimizer"]
    out = []

    def sample(name, t):
        flat = t.detach().reshape(-1)
        out.append([name, list(t.shape), float(flat[::4093].double().sum()),
                    float(flat[-7:].double().sum()) if flat.numel() else 0.0])

    for name, p in model.named_parameters():
        sample(name, p)
    for i, g in enumerate(state["grads"]):
        sample(f"grads.{i}", g)
    for name, b in model.named_buffers():
        sample(name, b)
    for i, p in enumerate(opt.param_groups[0]["params"]):
        for k, v in sorted(opt.state[p].items()):
            sample(f"opt.{i}.{k}", v)
    for k, v in sorted(state["views"].items()):
        sample("views." + k, v)
    emb = model.embed.weight
    out.append(["shared",
                model.head.weight is emb,
                state["views"]["first_rows"].data_ptr() == emb.data_ptr(),
                state["views"]["column"].storage().data_ptr() == emb.storage().data_ptr(),
                isinstance(emb, torch.nn.Parameter)])
    out.append(["plain", state["epoch"], state["step"], sum(state["losses"]),
                state["config"]["name"]])
    return out


def live_bytes(state):
    return sum(u8.numel() for u8 in storages(state).values())


def touch_pages(state):
    """Write every page of every storage once (in place, same values): the first
    training step writes all parameters, gradients and optimizer moments."""
    for u8 in storages(state).values():
        u8[::4096].add_(0)


# ---------------------------------------------------------------------------
# children

def proc_status():
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(rest.split()[0]) * 1024
    return fields


def reset_peak():
    """Reset VmHWM to the current RSS (Linux >= 4.0); False if not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def plugin_reducers():
    """The plug-in reducers, as the capture passes them to write_checkpoint; from
    torch_state alone when the others cannot be imported (they need the C
    extensions of a build: run with PYTHONPATH=BUILD/python for all of them)."""
    try:
        from _portal.state import plugins
        return plugins.reducers()
    except ImportError:
        from _portal.torch import objects as torch_state
        from _portal.checkpoint.context import PickleContext
        return torch_state.reducers(PickleContext()), torch_state.subclass_reducers(PickleContext())


def child_write(kind, size_bytes, target):
    import torch
    state = build_state(size_bytes)
    live = live_bytes(state)
    fp = fingerprint(state)
    peak_reset = reset_peak()
    before = proc_status()
    pickle_bytes = 0
    if kind == "portal":
        from _portal.checkpoint.write import write_checkpoint
        from _portal.run.codeindex import CodeRegistry
        exact, inherited = plugin_reducers()
        parent, name = os.path.split(target)
        t0 = time.perf_counter()
        info = write_checkpoint(parent, name, state, None, {}, registry=CodeRegistry(),
                                modules={}, reducers=exact, subclass_reducers=inherited)
        elapsed = time.perf_counter() - t0
        written = info.total_bytes
        pickle_bytes = info.manifest["files"]["state.pickle"]["size"]
        fmt = {"format_version": info.manifest["format_version"],
               "pack_hash": sorted({h for rel, rec in info.manifest["files"].items()
                                    if rel != "state.pickle" for h in ("sha256", "blake3")
                                    if h in rec})}
    else:
        fmt = {}
        t0 = time.perf_counter()
        with open(target, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        fd = os.open(os.path.dirname(target), os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(fd)          # as the checkpoint fsyncs its directories
        os.close(fd)
        elapsed = time.perf_counter() - t0
        written = os.path.getsize(target)
    after = proc_status()
    # Once more, now that the process has written (and freed) that much page
    # cache: on VMs whose memory is backed lazily by the host, the first use of
    # fresh pages dominates the first write (docs/benchmarks.md).
    again = None
    if kind == "portal":
        shutil.rmtree(os.path.realpath(target))
        os.unlink(target)
        t0 = time.perf_counter()
        write_checkpoint(parent, name, state, None, {}, registry=CodeRegistry(), modules={},
                         reducers=exact, subclass_reducers=inherited)
        again = time.perf_counter() - t0
    else:
        os.unlink(target)
        t0 = time.perf_counter()
        with open(target, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        again = time.perf_counter() - t0
    return {"seconds": elapsed, "again": again, "bytes": written, "live": live, "pickle": pickle_bytes,
            "rss_before": before["VmRSS"], "hwm_after": after["VmHWM"],
            "peak_reset": peak_reset, "fingerprint": fp, **fmt}


def child_read(kind, target):
    import torch
    model_class()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    if kind == "portal":
        from _portal.checkpoint.read import read_checkpoint
        _, state = read_checkpoint(target, None, main_module=types.ModuleType("m"),
                                   check_sources=False)
    else:
        # the bench's own file, holding __main__.Model: torch 2.6+ would refuse
        # it by default (weights_only=True); 1.13 already takes the argument
        state = torch.load(target, weights_only=False)
    loaded = time.perf_counter()
    touch_pages(state)
    usable = time.perf_counter()
    r1 = resource.getrusage(resource.RUSAGE_SELF)     # every thread's CPU, load-proof
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return {"load": loaded - t0, "seconds": usable - t0, "cpu": cpu,
            "fingerprint": fingerprint(state)}


def child_main(args):
    if not os.environ.get("PORTAL_BENCH_PYTHONPATH"):
        # the build's staged package: the checkout's lacks what the build generates
        # (_portal/job_contract.py) and the C extensions; $PORTAL_PYDIR names it where
        # the build is not the checkout's build/ (a lane's, scripts/lane.sh)
        staged = os.environ.get("PORTAL_PYDIR") or os.path.join(REPO, "build", "lib", "portal", "python")
        sys.path.insert(0, staged if os.path.isdir(staged) else os.path.join(REPO, "python"))
    if args.child == "write":
        result = child_write(args.kind, args.size_mib * MIB, args.target)
    else:
        result = child_read(args.kind, args.target)
    print("CHECKPOINT_IO " + json.dumps(result))


# ---------------------------------------------------------------------------
# the parent

def child_env():
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")
    # children import _portal from the checkout, or from where PYTHONPATH says
    # (a build tree's staged package, with its C extensions)
    if env.get("PYTHONPATH"):
        env["PORTAL_BENCH_PYTHONPATH"] = "1"
    return env


def run_child(mode, kind, target, size_mib):
    argv = [PYTHON, os.path.abspath(__file__), "--child", mode, "--kind", kind,
            "--target", target, "--size-mib", str(size_mib)]
    proc = subprocess.run(argv, env=child_env(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise Crash(f"{mode} {kind} exited with {proc.returncode}:\n{proc.stderr[-3000:]}")
    for line in proc.stdout.splitlines():
        if line.startswith("CHECKPOINT_IO "):
            return json.loads(line[len("CHECKPOINT_IO "):])
    raise Crash(f"{mode} {kind} printed no result:\n{proc.stdout[-2000:]}")


def run_dd(directory, nbytes, drop_caches=False, info_reads=True):
    """dd's write (conv=fsync) of ``nbytes``, then its sequential read of the same
    file with the file's pages evicted first: the disk's own bandwidths, the read
    once the freed memory has settled ("read").  With ``info_reads``, also a read
    started at once after the eviction ("read_at_once", for information: dd then
    reuses the memory the eviction just freed, see ``evict``) and one with
    iflag=direct ("read_direct", for information: the disk without the page
    cache's cost of filling fresh memory, which on this VM can be the slower
    part)."""
    count = -(-nbytes // DD_BLOCK)
    path = os.path.join(directory, "dd.bin")
    t0 = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={path}",
                    f"bs={DD_BLOCK}", f"count={count}", "conv=fsync", "status=none"], check=True)
    elapsed = time.perf_counter() - t0
    out = {"seconds": elapsed, "bytes": count * DD_BLOCK}
    if info_reads:
        out["read_at_once"] = dd_read_files([path], drop_caches, settle=False)["read"]
        out["read_direct"] = dd_read_files([path], drop_caches, direct=True)["read"]
    out["read"] = dd_read_files([path], drop_caches)["read"]
    os.unlink(path)
    return out


def dd_read_files(paths, drop_caches=False, settle=True, direct=False):
    """dd's sequential read of each of ``paths`` in turn, their pages evicted
    first (``direct``: with iflag=direct): {"bytes", "read" (seconds)}."""
    evict(paths, drop_caches, settle)
    nbytes = sum(os.path.getsize(p) for p in paths)
    t0 = time.perf_counter()
    for path in paths:
        subprocess.run(["dd", f"if={path}", "of=/dev/null", f"bs={DD_BLOCK}", "status=none"]
                       + (["iflag=direct"] if direct else []), check=True)
    return {"bytes": nbytes, "read": time.perf_counter() - t0}


def files_under(path):
    path = os.path.realpath(path)
    if os.path.isfile(path):
        return [path]
    return [os.path.join(d, f) for d, _, names in os.walk(path) for f in names]


def evict(paths, drop_caches, settle=True):
    """Evict the files' pages from the page cache (they are clean: fsynced), then
    (``settle``) wait SETTLE_S before the cold read that follows.

    Why the wait: on a virtual machine that returns free memory to its host
    (free page reporting: this project's VMs boot with
    page_reporting.page_reporting_order=11), the pages an eviction frees are
    still backed by the host for a moment; a reader started at once fills its
    page cache with them, one started later has every page it takes faulted in
    by the host.  Measured here (1 GiB, dd bs=16M): 1.4-2.0 GB/s and 0.27-0.34 s
    of CPU at once, 0.6-0.8 GB/s and 0.6-1.0 s a second or more later, the same
    file; 2 GiB freed are not all returned after 3 s (dd's CPU 0.79 s/GiB then,
    0.94-1.10 after 8 s), hence 6 s (docs/benchmarks.md, "Limits of these
    figures").  A resume meets the second case (its process starts long after
    anything was freed), and so does every reader here that starts a Python
    process; so every cold read, dd's included, starts once the freed memory
    has gone back."""
    if drop_caches:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1")
    else:
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    if settle:
        time.sleep(SETTLE_S)


def warm_up(paths):
    """Read every byte of the files once (buffered): their pages in the page cache."""
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while f.read(DD_BLOCK):
                pass


def uncached_bytes(paths):
    """Bytes of the files not in the page cache now (fincore), or None."""
    cached = cached_bytes(paths)
    if cached is None:
        return None
    return max(0, sum(os.path.getsize(p) for p in paths) - cached)


def cached_bytes(paths):
    """Bytes of the files now in the page cache (fincore), or None."""
    if not shutil.which("fincore"):
        return None
    proc = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES"] + paths,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    return sum(int(x) for x in proc.stdout.split())


def progress(msg):
    sys.stderr.write(f"  {msg}\n")
    sys.stderr.flush()


def measure(args, directory):
    """{key: [sample dicts]} over args.repeats interleaved, rotating repetitions."""
    res = {k: [] for k in ("dd", "dd_own", "portal_w", "torch_w", "portal_cold", "torch_cold",
                           "portal_warm", "torch_warm")}
    reference = None
    residue = []
    missing = []
    for rep in range(args.repeats):
        ck = os.path.join(directory, "ck", "job")
        pt = os.path.join(directory, "state.pt")
        shutil.rmtree(os.path.join(directory, "ck"), ignore_errors=True)
        os.makedirs(os.path.join(directory, "ck"))
        writers = ["portal", "torch", "dd"]
        writers = writers[rep % 3:] + writers[:rep % 3]
        for w in writers:
            if w == "dd":
                # as many bytes as the checkpoint (known after its first write)
                nbytes = res["portal_w"][-1]["bytes"] if res["portal_w"] else \
                    args.size_mib * MIB
                res["dd"].append(run_dd(directory, nbytes, args.drop_caches))
                progress(f"rep {rep + 1}: dd write {res['dd'][-1]['seconds']:.2f} s, read "
                         f"{res['dd'][-1]['read']:.2f} s")
                continue
            r = run_child("write", w, ck if w == "portal" else pt, args.size_mib)
            if reference is None:
                reference = r["fingerprint"]
            elif r["fingerprint"] != reference:
                raise Crash(f"{w} writer built a different state")
            res[f"{w}_w"].append(r)
            progress(f"rep {rep + 1}: write {w} {r['seconds']:.2f} s, "
                     f"{r['bytes'] / MIB:.1f} MiB")
        readers = ["portal", "torch"] if rep % 2 == 0 else ["torch", "portal"]
        for mode in ("cold", "warm"):
            for w in readers:
                target = ck if w == "portal" else pt
                paths = files_under(target)
                if mode == "cold":
                    evict(paths, args.drop_caches)
                    residue.append(cached_bytes(paths))
                else:
                    warm_up(paths)
                    # the memory state a cold reader meets (evict's docstring): the
                    # reader before this one freed as much as it read, still backed
                    # by the host for a moment; unsettled, the second reader of a
                    # pair would fault it in for nothing and the first pay in full
                    time.sleep(SETTLE_S)
                    missing.append(uncached_bytes(paths))
                r = run_child("read", w, target, args.size_mib)
                if r["fingerprint"] != reference:
                    raise Crash(f"{w} ({mode}) restored different tensors than were written")
                res[f"{w}_{mode}"].append(r)
                if mode == "cold" and w == "portal":
                    # dd reading the very files Portal just read, evicted again:
                    # the same bytes from the same place (after Portal's read, so
                    # any cache below the page cache favours dd, not Portal)
                    res["dd_own"].append(dd_read_files(paths, args.drop_caches))
                progress(f"rep {rep + 1}: read {w} {mode} {r['load']:.2f} s, usable "
                         f"{r['seconds']:.2f} s")
    shutil.rmtree(os.path.join(directory, "ck"), ignore_errors=True)
    try:
        os.unlink(os.path.join(directory, "state.pt"))
    except FileNotFoundError:
        pass
    return res, residue, missing


# ---------------------------------------------------------------------------
# sparse state and the cost as the state grows, through portal-run and portal

SCALE_PROGRAM = """\
import sys, time
import numpy as np
MIB = 1 << 20
size = int(sys.argv[1]) * MIB
block = np.random.default_rng(0).integers(0, 256, 4 * MIB, dtype=np.uint8)
data = np.tile(block, size // (4 * MIB))            # dense: no zero pages
for step in range(3):
    print(f"ITER {step} {time.time():.6f}", flush=True)
    data[step] ^= 1                                  # FAKE-OOM here
print("done", int(data[:3].sum()))
"""
SPARSE_PROGRAM = """\
import sys
import numpy as np
MIB = 1 << 20
zeros = np.zeros(int(sys.argv[1]) * MIB, dtype=np.uint8)   # never touched
dense = np.random.default_rng(1).integers(0, 256, 16 * MIB, dtype=np.uint8)
for step in range(3):
    zeros[step * 4096 * 1001] = step + 1             # FAKE-OOM here
print("done", int(zeros.sum()), int(dense[:5].sum()))
"""
SPARSE_TOUCHED = 16 * MIB + 3 * 4096                 # the bytes SPARSE_PROGRAM writes
SPARSE_LAST_BYTE = 2 * 4096 * 1001                  # the offset of its last write into zeros
SPARSE_MIN_MIB = SPARSE_LAST_BYTE // MIB + 1          # the smallest zeros that hold it


def find_tool(name, variable):
    path = os.environ.get(variable) or os.path.join(REPO, "build", "bin", name)
    return path if os.access(path, os.X_OK) else shutil.which(name)


def marker_line(program):
    return next(i for i, line in enumerate(program.splitlines(), 1) if "FAKE-OOM here" in line)


def portal_env(home, script=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTAL_")}
    env["PORTAL_HOME"] = home
    # the interpreter the rest of the bench measures (portal-run would otherwise
    # take the first python3 on PATH, which may be another one, without numpy)
    env["PORTAL_PYTHON"] = os.environ.get("PORTAL_PYTHON", PYTHON)
    if script:
        env["PORTAL_FAKE_OOM"] = f"{script}:{marker_line(open(script).read())}@2"
    return env


def suspend_and_resume(tools, directory, program, size_mib, drop_caches):
    """Run ``program`` under portal-run until its fake OOM, then `portal resume`
    it with the checkpoint's pages evicted. Returns the timings and sizes."""
    portal_run, portal = tools
    home = os.path.join(directory, "home")
    shutil.rmtree(home, ignore_errors=True)
    script = os.path.join(directory, "prog.py")
    with open(script, "w") as f:
        f.write(program)
    p = subprocess.run([portal_run, script, str(size_mib)], cwd=directory,
                       env=portal_env(home, script), stdin=subprocess.DEVNULL,
                       capture_output=True, text=True)
    exited = time.time()
    marks = [line.split() for line in p.stdout.splitlines() if line.startswith("ITER ")]
    found = [line.split()[3].rstrip(",") for line in p.stderr.splitlines()
             if line.startswith("portal: suspended: job ")]
    if p.returncode != 75 or not found:
        raise Crash(f"portal-run of the {size_mib} MiB state did not suspend "
                    f"(exit {p.returncode}):\n{p.stderr[-3000:]}")
    job = found[0]
    checkpoint = os.path.realpath(os.path.join(home, "jobs", job, "checkpoint"))
    paths = files_under(checkpoint)
    stored = sum(os.stat(x).st_blocks * 512 for x in paths)
    logical = sum(os.path.getsize(x) for x in paths)
    evict(paths, drop_caches)
    started = time.time()
    r = subprocess.run([portal, "resume", job], cwd=directory, env=portal_env(home),
                       stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if r.returncode != 0:
        raise Crash(f"portal resume of the {size_mib} MiB state failed:\n{r.stderr[-3000:]}")
    again = [line.split() for line in r.stdout.splitlines() if line.startswith("ITER ")]
    with open(os.path.join(home, "jobs", job, "job.json")) as f:
        record = json.load(f)           # the runtime's own figures: the write, the read
    result = {"size_mib": size_mib, "stored": stored, "logical": logical,
              "suspend": exited - float(marks[-1][2]) if marks else None,
              "resume": float(again[0][2]) - started if again else None,
              "write": record.get("checkpoint_write", {}).get("seconds"),
              "read": record.get("checkpoint_read", {}).get("seconds")}
    shutil.rmtree(home, ignore_errors=True)
    return result


def measure_growth(args, directory):
    """[(size, suspend sample, dd sample)] for each --scale-mib size, and the
    sparse run; None when portal-run and portal are not built."""
    tools = (find_tool("portal-run", "PORTAL_RUN"), find_tool("portal", "PORTAL"))
    if None in tools:
        return None
    work = os.path.join(directory, "growth")
    os.makedirs(work, exist_ok=True)
    out = []
    for size in args.scale_mib:
        sample = suspend_and_resume(tools, work, SCALE_PROGRAM, size, args.drop_caches)
        dd = run_dd(work, size * MIB, args.drop_caches, info_reads=False)   # not shown there
        progress(f"growth {size} MiB: suspend {sample['suspend']:.2f} s, resume "
                 f"{sample['resume']:.2f} s; dd write {dd['seconds']:.2f} s, read {dd['read']:.2f} s")
        out.append((size, sample, dd))
    sparse = None
    if args.sparse_mib:
        sparse = suspend_and_resume(tools, work, SPARSE_PROGRAM, args.sparse_mib,
                                    args.drop_caches)
        progress(f"sparse {args.sparse_mib} MiB of untouched zeros: stored "
                 f"{sparse['stored'] / MIB:.1f} MiB of {sparse['logical'] / MIB:.1f} MiB")
    shutil.rmtree(work, ignore_errors=True)
    return out, sparse


def print_growth(growth):
    """The table of the cost as the state grows; rows for --check."""
    runs, sparse = growth
    nan = float("nan")
    print(f"{'state':>9} {'suspend s':>10} {'(write)':>8} {'MiB/s':>7} {'dd write':>9} "
          f"{'resume s':>9} {'(read)':>7} {'MiB/s':>7} {'dd read':>8}")
    for size, s, dd in runs:
        w = s["logical"] / MIB / s["suspend"] if s["suspend"] else nan
        r = s["logical"] / MIB / s["resume"] if s["resume"] else nan
        print(f"{size:>5} MiB {s['suspend'] or nan:>10.2f} {s['write'] or nan:>8.2f} {w:>7.0f} "
              f"{dd['bytes'] / MIB / dd['seconds']:>9.0f} {s['resume'] or nan:>9.2f} "
              f"{s['read'] or nan:>7.2f} {r:>7.0f} {dd['bytes'] / MIB / dd['read']:>8.0f}")
    print("suspend: from the error (the failed iteration's start) to portal-run's exit;\n"
          "resume: from starting `portal resume` (checkpoint evicted) to the first resumed\n"
          "iteration; (write), (read): of which the checkpoint's write / read and verify, as\n"
          "the job records them; MiB/s: checkpoint bytes / the whole time; dd: MiB/s of as\n"
          "many bytes, written with conv=fsync / read back with its pages evicted")
    if sparse is None:      # --sparse-mib 0
        return []
    ratio = sparse["stored"] / SPARSE_TOUCHED
    return [("sparse: stored / touched bytes", f"{sparse['stored'] / MIB:.1f}",
             f"{SPARSE_TOUCHED / MIB:.1f}", f"{ratio:.3f}", f"<= {TARGET_SPARSE}",
             ratio <= TARGET_SPARSE)]


def med(samples, key="seconds"):
    return statistics.median(s[key] for s in samples)


def evaluate(res):
    """Rows: (measurement, portal, other, ratio text, target text, ok)."""
    rows = []
    pw, tw, dd = res["portal_w"], res["torch_w"], res["dd"]
    mbps = lambda samples: statistics.median(s["bytes"] / s["seconds"] for s in samples) / MIB
    p_tp, t_tp, d_tp = mbps(pw), mbps(tw), mbps(dd)
    r = p_tp / d_tp
    rows.append(("write MiB/s vs dd (fsync)", f"{p_tp:.0f}", f"{d_tp:.0f}", f"{r:.2f}x",
                 f">= {TARGET_VS_DD}x", r >= TARGET_VS_DD))
    r = p_tp / t_tp
    rows.append(("write MiB/s vs torch.save+fsync", f"{p_tp:.0f}", f"{t_tp:.0f}",
                 f"{r:.2f}x", f">= {TARGET_VS_TORCH_SAVE}x", r >= TARGET_VS_TORCH_SAVE))
    again = lambda samples: statistics.median(s["bytes"] / s["again"] for s in samples) / MIB
    p_again, t_again = again(pw), again(tw)
    rows.append(("  2nd write in process vs dd", f"{p_again:.0f}", f"{d_tp:.0f}",
                 f"{p_again / d_tp:.2f}x", "(info)", None))
    rows.append(("  2nd write in process vs torch", f"{p_again:.0f}", f"{t_again:.0f}",
                 f"{p_again / t_again:.2f}x", "(info)", None))
    extra = lambda s: s["hwm_after"] - s["rss_before"]
    p_extra = statistics.median(extra(s) for s in pw) / MIB
    t_extra = statistics.median(extra(s) for s in tw) / MIB
    pickle_mib = statistics.median(s["pickle"] for s in pw) / MIB
    beyond = p_extra - pickle_mib
    rows.append(("peak extra MiB while writing", f"{p_extra:.1f}", f"{t_extra:.1f}",
                 f"{beyond:+.1f} over pickle", f"< {TARGET_EXTRA_MIB} MiB",
                 beyond < TARGET_EXTRA_MIB))
    for mode in ("cold", "warm"):
        p, t = med(res[f"portal_{mode}"]), med(res[f"torch_{mode}"])
        r = t / p
        rows.append((f"restore to usable s, {mode}", f"{p:.2f}", f"{t:.2f}", f"{r:.2f}x",
                     f">= {TARGET_RESTORE}x", r >= TARGET_RESTORE))
        if mode == "cold":
            p_rd = pw[0]["bytes"] / med(res["portal_cold"])
            d_rd = statistics.median(s["bytes"] / s["read"] for s in dd)
            r = p_rd / d_rd
            rows.append(("restore MiB/s vs dd read, cold", f"{p_rd / MIB:.0f}", f"{d_rd / MIB:.0f}",
                         f"{r:.2f}x", f">= {TARGET_VS_DD_READ}x", r >= TARGET_VS_DD_READ))
            a_rd = statistics.median(s["bytes"] / s["read_at_once"] for s in dd)
            rows.append(("  vs dd read at once after evicting", f"{p_rd / MIB:.0f}",
                         f"{a_rd / MIB:.0f}", f"{p_rd / a_rd:.2f}x", "(info)", None))
            x_rd = statistics.median(s["bytes"] / s["read_direct"] for s in dd)
            rows.append(("  vs dd read iflag=direct", f"{p_rd / MIB:.0f}",
                         f"{x_rd / MIB:.0f}", f"{p_rd / x_rd:.2f}x", "(info)", None))
            if res.get("dd_own"):
                o_rd = statistics.median(s["bytes"] / s["read"] for s in res["dd_own"])
                rows.append(("  vs dd of its own files, cold", f"{p_rd / MIB:.0f}",
                             f"{o_rd / MIB:.0f}", f"{p_rd / o_rd:.2f}x", "(info)", None))
        if all("cpu" in x for x in res[f"portal_{mode}"] + res[f"torch_{mode}"]):
            p, t = med(res[f"portal_{mode}"], "cpu"), med(res[f"torch_{mode}"], "cpu")
            rows.append((f"  CPU s to usable, {mode}", f"{p:.2f}", f"{t:.2f}", f"{t / p:.2f}x",
                         "(info)", None))
        p, t = med(res[f"portal_{mode}"], "load"), med(res[f"torch_{mode}"], "load")
        rows.append((f"  of which load s, {mode}", f"{p:.2f}", f"{t:.2f}", f"{t / p:.2f}x",
                     "(info)", None))
    live = pw[0]["live"]
    size = pw[0]["bytes"] / live
    rows.append(("size / live tensor bytes", f"{size:.4f}",
                 f"{tw[0]['bytes'] / live:.4f}", f"{size:.4f}", f"<= {TARGET_SIZE}",
                 size <= TARGET_SIZE))
    return rows


def print_table(rows):
    head = f"{'measurement':34} {'portal':>9} {'other':>9}  {'ratio':>18}  {'target':>10}  result"
    print(head)
    print("-" * len(head))
    for name, p, o, ratio, target, ok in rows:
        verdict = "" if ok is None else ("PASS" if ok else "FAIL")
        print(f"{name:34} {p:>9} {o:>9}  {ratio:>18}  {target:>10}  {verdict}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=2048,
                    help="live tensor bytes of the state, MiB (default 2048)")
    ap.add_argument("--repeats", type=int, default=3, help="repetitions (default 3)")
    ap.add_argument("--dir", help="directory to write in (default: a new one in $TMPDIR)")
    ap.add_argument("--drop-caches", action="store_true",
                    help="cold reads through /proc/sys/vm/drop_caches (root; evicts "
                         "every file on the machine) instead of posix_fadvise")
    ap.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    ap.add_argument("--json", help="write the raw samples here")
    ap.add_argument("--scale-mib", type=int, nargs="*", default=[256, 1024, 4096],
                    help="state sizes (MiB) of the suspend/resume table through portal-run "
                         "(default 256 1024 4096; none: no table)")
    ap.add_argument("--sparse-mib", type=int, default=4096,
                    help="untouched np.zeros of the sparse run, MiB (default 4096; "
                         f"0: no sparse run; else at least {SPARSE_MIN_MIB})")
    ap.add_argument("--child", choices=("write", "read"), help=argparse.SUPPRESS)
    ap.add_argument("--kind", choices=("portal", "torch"), help=argparse.SUPPRESS)
    ap.add_argument("--target", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child_main(args)
    if args.sparse_mib and args.sparse_mib < SPARSE_MIN_MIB:
        ap.error(f"--sparse-mib {args.sparse_mib}: the sparse run writes at "
                 f"{SPARSE_LAST_BYTE / MIB:.1f} MiB into its zeros: give 0 (no sparse run) "
                 f"or at least {SPARSE_MIN_MIB}")

    started = datetime.datetime.now(datetime.timezone.utc)
    owned = args.dir is None
    directory = tempfile.mkdtemp(prefix="portal-ckio-") if owned else args.dir
    os.makedirs(directory, exist_ok=True)
    head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip() or "?"
    print(f"Portal checkpoint I/O benchmark, {started:%Y-%m-%d %H:%M} UTC, checkout {head}")
    print(f"machine: {platform.node()}, {os.cpu_count()} cores, Linux {platform.release()}, "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"state:   {args.size_mib} MiB of CPU tensors, {args.repeats} repetitions, "
          f"directory {directory}")
    print(f"cold reads: {'drop_caches' if args.drop_caches else 'posix_fadvise(DONTNEED)'}")
    t0 = time.perf_counter()
    try:
        res, residue, missing = measure(args, directory)
        growth = measure_growth(args, directory) if args.scale_mib else None
    except Crash as exc:
        print(f"checkpoint_io.py: CRASH: {exc}", file=sys.stderr)
        return 2
    finally:
        if owned:
            shutil.rmtree(directory, ignore_errors=True)
    rows = evaluate(res)
    pw = res["portal_w"][0]
    print(f"live tensor bytes {pw['live'] / MIB:.1f} MiB; checkpoint {pw['bytes'] / MIB:.1f} "
          f"MiB (state.pickle {pw['pickle'] / 1024:.1f} KiB); torch.save file "
          f"{res['torch_w'][0]['bytes'] / MIB:.1f} MiB")
    print(f"checkpoint format version {pw.get('format_version')}, pack-file chunks hashed with "
          f"{', '.join(pw.get('pack_hash') or ['?'])}")
    known = [r for r in residue if r is not None]
    if known:
        print(f"page cache left of the files at a cold read: at most {max(known) / MIB:.1f} MiB")
    known = [r for r in missing if r is not None]
    if known:
        print(f"bytes of the files not in the page cache at a warm read: at most "
              f"{max(known) / MIB:.1f} MiB")
    if not all(s["peak_reset"] for s in res["portal_w"] + res["torch_w"]):
        print("warning: /proc/self/clear_refs failed: peak memory includes building the state")
    print()
    if growth is not None:
        rows += print_growth(growth)
        print()
    elif args.scale_mib:
        print("growth table: skipped (no portal-run and portal: build first, or set "
              "PORTAL_RUN and PORTAL)\n")
    print_table(rows)
    print()
    print("medians of the repetitions; 'other' is dd for the rows that say so, else torch;\n"
          "restore ratio = torch time / portal time (> 1: portal is faster); '2nd write':\n"
          "the same writer again in the same process, its first output deleted")
    missed = [r[0] for r in rows if r[5] is False]
    print(f"total time {time.perf_counter() - t0:.0f} s, load average "
          f"{os.getloadavg()[0]:.2f}; "
          + ("all targets met" if not missed else "missed: " + ", ".join(missed)))
    if args.check:
        print("\ntargets (issue 14 and before), this run:")
        for name, _, _, ratio, target, ok in rows:
            if ok is not None:
                print(f"  {'PASS' if ok else 'FAIL'}  {name.strip()}: {ratio.strip()}, "
                      f"target {target.strip()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"size_mib": args.size_mib, "samples": res, "growth": growth}, f, indent=1)
    return 1 if (args.check and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
