"""What a suspension suggests for the resume: the resource that ran short and a
size that fits what failed (suspend.py's last line, and `suggested_mem_gib` /
`suggested_gpu` in the job record, which `portal show` repeats).

- A CUDA out-of-memory error ran short of GPU memory: the hint is `--gpu MODEL`
  (a GPU with more memory), never `--mem` (the machine's memory did not run out).
- Otherwise `--mem N`: twice the memory the job had (its memory tripwire's cap,
  else the machine's), and never less than that memory plus the allocation that
  failed when the error says its size ("Tried to allocate 1.90 GiB", numpy's
  "Unable to allocate 1.90 GiB", torch's "you tried to allocate 2040109465 bytes").
- A size this machine does not have (`portal resume --mem` here would refuse it)
  is said to be for another machine.
"""
import os
import re

GIB = 1 << 30
_UNITS = {"bytes": 1, "B": 1, "KiB": 1 << 10, "KB": 1 << 10, "MiB": 1 << 20, "MB": 1 << 20,
          "GiB": GIB, "GB": GIB, "TiB": 1 << 40, "TB": 1 << 40, "PiB": 1 << 50, "PB": 1 << 50}
_REQUEST = re.compile(r"(?:[Tt]ried to allocate|Unable to allocate) (\d{1,20}(?:\.\d{1,9})?) ?"
                      r"(bytes|[KMGTP]i?B|B)\b")
_CUDA = ("CUDA out of memory", "cuda.OutOfMemoryError")


def is_gpu_shortage(text):
    """True when the error ran short of a GPU's memory, not the machine's."""
    return any(marker in (text or "") for marker in _CUDA)


def failed_request_bytes(text):
    """The size of the allocation that failed, as the error's words give it; None."""
    match = _REQUEST.search((text or "")[:4096])
    if not match:
        return None
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def had_bytes():
    """The memory the job had: its memory tripwire's cap (portal-run --mem, or the
    machine's cap), else RLIMIT_DATA, else the machine's physical memory; None."""
    # The resident cap (the default) names its cap; its RLIMIT_DATA is far above
    # the machine and says nothing of the memory the job had.
    from _portal import safepoint
    cap = safepoint.memory_cap()
    if cap:
        return cap
    try:
        import resource
        soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
        if soft != resource.RLIM_INFINITY:
            return soft
    except (ImportError, OSError, ValueError):
        pass
    return machine_bytes()


def machine_bytes():
    """This machine's memory as `portal resume --mem` checks it: the physical
    memory, or the memory cgroup's limit when lower; None when unknown."""
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None
    least = physical
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path, "rb") as f:
                text = f.read(64).strip()
            if text.isdigit():
                least = min(least, int(text))
        except OSError:
            continue
    return least


def mem_gib(error_text=None):
    """The --mem to suggest, in GiB: twice what the job had, and at least what it
    had plus the allocation that failed."""
    had = had_bytes()
    if had is None:
        return 64
    need = 2 * had
    failed = failed_request_bytes(error_text)
    if failed:
        need = max(need, had + failed)
    return max(2, -(-need // GIB))


def _gpu_of(text):
    match = re.search(r"GPU (\d{1,3})", (text or "")[:4096])
    return int(match.group(1)) if match else 0


def gpu_words(error_text):
    """"NVIDIA A10G, 22.0 GiB" for the GPU that ran short, or "" when unknown."""
    import sys
    torch = sys.modules.get("torch")
    try:
        if not torch.cuda.is_initialized():     # a real CUDA error initialized it; never start CUDA here
            return ""
        index = _gpu_of(error_text)
        props = torch.cuda.get_device_properties(index)
        return f"{props.name}, {props.total_memory / GIB:.1f} GiB"
    except Exception:   # noqa: BLE001 - no torch, no CUDA, a fake: no detail
        return ""


def resume_line(job_id, error_text):
    """The suspension's last line: how to resume it where the resource suffices."""
    if is_gpu_shortage(error_text):
        gpu = gpu_words(error_text)
        this = f" than this one's ({gpu})" if gpu else ""
        return (f"resume it on a machine with a GPU of more memory{this}: "
                f"portal resume {job_id} --gpu MODEL (e.g. --gpu A100; --on slurm asks Slurm for one)")
    gib = mem_gib(error_text)
    line = f"resume it on a machine with more memory: portal resume {job_id} --mem {gib}"
    return line + for_another_machine(gib)


def for_another_machine(gib):
    """" (this machine has 23.5 GiB: on another one, or with --on slurm)" when this
    machine has less than `gib` GiB (`portal resume --mem` here refuses it); ""."""
    machine = machine_bytes()
    if machine is None or gib * GIB <= machine:
        return ""
    return f" (this machine has {machine / GIB:.1f} GiB: on another one, or with --on slurm)"
