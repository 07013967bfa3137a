"""What a suspension suggests for the resume: the resource that ran short and a
size that fits what failed (suspend.py's last line, and `suggested_mem_gib` /
`suggested_gpu` in the job record, which `portal show` repeats).

- A CUDA out-of-memory error ran short of GPU memory: the hint is `--gpu MODEL`
  (a GPU with more memory), never `--mem` (the machine's memory did not run out).
- Otherwise `--mem SIZE`: at least twice the memory the job had (its memory
  tripwire's cap, else the machine's), and, when the error says the size of the
  allocation that failed ("Tried to allocate 1.90 GiB", numpy's "Unable to
  allocate 1.90 GiB", torch's "you tried to allocate 2040109465 bytes"), a SIZE
  whose own cap leaves room for that allocation on top of all the job had:
  `--mem SIZE` caps a job at SIZE less the tripwire's reserve (10% of SIZE within
  [256 MiB, 1 GiB], at most half: src/launcher/tripwire.cpp), so SIZE is the
  least whose cap holds both.  SIZE is written in the unit of the allocation the
  error names (`--mem 3G` after "1.90 GiB", `--mem 1792M` after "600.00 MiB";
  G where it names bytes or none), rounded up to a whole number of it (M to a
  multiple of 256), never below 2G in G.
- A size this machine does not have (`portal resume --mem` here would refuse it)
  is said to be for another machine.
"""
import os
import re

GIB = 1 << 30
_UNITS = {"bytes": 1, "B": 1, "KiB": 1 << 10, "KB": 1 << 10, "MiB": 1 << 20, "MB": 1 << 20,
          "GiB": GIB, "GB": GIB, "TiB": 1 << 40, "TB": 1 << 40, "PiB": 1 << 50, "PB": 1 << 50,
          "EiB": 1 << 60, "EB": 1 << 60}
# numpy writes three significant digits with the point kept ("600. MiB", "1.90 GiB")
_REQUEST = re.compile(r"(?:[Tt]ried to allocate|Unable to allocate) (\d{1,20}(?:\.\d{0,9})?) ?"
                      r"(bytes|[KMGTPE]i?B|B)\b")
_CUDA = ("CUDA out of memory", "cuda.OutOfMemoryError")


def is_gpu_shortage(text):
    """True when the error ran short of a GPU's memory, not the machine's."""
    return any(marker in (text or "") for marker in _CUDA)


def failed_request_bytes(text):
    """The size of the allocation that failed, as the error's words give it; None."""
    request = _failed_request(text)
    return request[0] if request else None


def _failed_request(text):
    """(bytes, the unit the error wrote them in) of the allocation that failed; None."""
    match = _REQUEST.search((text or "")[:4096])
    if not match:
        return None
    return int(float(match.group(1)) * _UNITS[match.group(2)]), match.group(2)


def had_bytes():
    """The memory the job had: its memory tripwire's cap (portal-run --mem, or the
    machine's cap), else RLIMIT_DATA, else the machine's physical memory; None."""
    # The resident cap (the default) names its cap; its RLIMIT_DATA is far above
    # the machine and says nothing of the memory the job had.
    from _portal.rescue import safepoint
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


# portal-run's memory tripwire (include/portal/tripwire.hpp, src/launcher/tripwire.cpp)
_MIN_RESERVE = 256 << 20
_MAX_RESERVE = 1 << 30
# The unit --mem is written in after an allocation named in each unit (the CLI
# takes K, M, G, T: src/launcher/size.cpp), and the step it is rounded up to.
_MIB = 1 << 20
_SIZES = {"M": _MIB, "G": GIB, "T": 1 << 40}
_STEPS = {"M": 256 * _MIB, "G": GIB, "T": 1 << 40}
_UNIT_OF = {"MiB": "M", "MB": "M", "GiB": "G", "GB": "G", "TiB": "T", "TB": "T", "PiB": "T", "PB": "T",
            "EiB": "T", "EB": "T"}
_LEAST_GIB = 2          # the least suggestion in G (src/cli/job_view.cpp's too)
_UNKNOWN_GIB = 64       # when the memory the job had is unknown


def cap_for(memory):
    """The cap `portal-run --mem MEMORY` sets: MEMORY less the reserve."""
    reserve = min(max(memory // 10, _MIN_RESERVE), _MAX_RESERVE)
    return memory - min(reserve, memory // 2)


def memory_for(cap):
    """The least memory whose cap_for() is `cap` or more (cap_for() grows with
    the memory: a bisection, some 40 steps)."""
    low, high = 0, 2 * cap + _MAX_RESERVE      # cap_for(high) >= cap
    while low < high:
        middle = (low + high) // 2
        if cap_for(middle) >= cap:
            high = middle
        else:
            low = middle + 1
    return low


def mem_suggestion(error_text=None, had=None):
    """(bytes, text) of the --mem to suggest: the least size, in the unit of the
    allocation the error names (module docstring), of at least twice what the job
    had, whose cap holds what the job had plus the allocation that failed."""
    if had is None:
        had = had_bytes()
    if had is None:
        return _UNKNOWN_GIB * GIB, f"{_UNKNOWN_GIB}G"
    request = _failed_request(error_text)
    unit = _UNIT_OF.get(request[1], "G") if request else "G"
    step = _STEPS[unit]
    least = 2 * had
    if request:
        least = max(least, memory_for(had + request[0]))
    size = -(-least // step) * step
    if unit == "G":
        size = max(size, _LEAST_GIB * GIB)
    return size, f"{size // _SIZES[unit]}{unit}"


def mem_gib(error_text=None):
    """The suggested --mem in whole GiB (rounded up: the job record's
    suggested_mem_gib, which `portal show` repeats)."""
    size, _ = mem_suggestion(error_text)
    return -(-size // GIB)


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
    size, text = mem_suggestion(error_text)
    line = f"resume it on a machine with more memory: portal resume {job_id} --mem {text}"
    return line + for_another_machine(size)


def for_another_machine(size):
    """" (this machine has 23.5 GiB: on another one, or with --on slurm)" when this
    machine has less than `size` bytes (`portal resume --mem` here refuses it); ""."""
    machine = machine_bytes()
    if machine is None or size <= machine:
        return ""
    return f" (this machine has {machine / GIB:.1f} GiB: on another one, or with --on slurm)"
