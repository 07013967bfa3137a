"""What ran short when an out-of-memory error reached a loop: one line of the
suspension (suspend.py), from what the process had at the moment of the error.

rescue/entry.py's Rescuer notes them first thing (note_shortage()), before anything is freed
(the rescue's reserve included): two reads of /proc/self (its memory, its
RLIMIT_DATA), no import and no allocation of any size.  line() reads them once
the checkpoint is written:

    what ran short: the address-space limit the memory tripwire sets near its cap of 768.0 MiB (RLIMIT_DATA 795.1 MiB, 794.0 MiB of it in use; resident memory 741.3 MiB)
    what ran short: the memory tripwire's cap of 768.0 MiB: resident memory 700.2 MiB, and the request would have passed it
    what ran short: the address-space limit (RLIMIT_DATA) of 768.0 MiB: 767.9 MiB of it in use
    what ran short: the machine's memory (resident memory 21.0 GiB; 310.0 MiB available)

docs/architecture.md "The memory tripwire" says what each cap counts.
"""
from _portal.rescue import entry as rescue

# Within this much of RLIMIT_DATA, the data segment is taken to have reached it
# (a refused request is one of its sizes at least; most are far smaller).
_NEAR_LIMIT = 16 << 20


def _status_kib(status, field):
    for row in status.split(b"\n"):
        if row.startswith(field + b":"):
            parts = row.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1]) * 1024
    return None


def _data_limit(limits):
    """The soft RLIMIT_DATA in bytes, or None when unlimited or unknown."""
    for row in limits.split(b"\n"):
        if row.startswith(b"Max data size"):
            parts = row[len(b"Max data size"):].split()
            return int(parts[0]) if parts and parts[0].isdigit() else None
    return None


def _available():
    for row in rescue.read_proc("/proc/meminfo").split(b"\n"):
        if row.startswith(b"MemAvailable:"):
            parts = row.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1]) * 1024
    return None


def line(seen, cap, size):
    """The line's text ("what ran short: ..."), or None when nothing was noted.
    seen: what the rescue noted (Rescuer.shortage: the two files' bytes, or None);
    cap: the resident cap in bytes (safepoint.memory_cap()), None under the
    address cap or none; size: a function that writes a byte count."""
    if seen is None:
        return None
    status, limits = seen
    resident = _status_kib(status, b"RssAnon")
    data = _status_kib(status, b"VmData")
    limit = _data_limit(limits)
    at_limit = data is not None and limit is not None and data + _NEAR_LIMIT >= limit
    rss = f"resident memory {size(resident)}" if resident is not None else None
    if cap:
        if at_limit:
            return (f"what ran short: the address-space limit the memory tripwire sets near its cap of "
                    f"{size(cap)} (RLIMIT_DATA {size(limit)}, {size(data)} of it in use"
                    + (f"; {rss})" if rss else ")"))
        return (f"what ran short: the memory tripwire's cap of {size(cap)}"
                + (f": {rss}, and the request would have passed it" if rss else ""))
    if limit is not None:   # the address cap (PORTAL_MEMORY_TRIPWIRE=address), or ulimit -d
        used = f": {size(data)} of it in use" if data is not None else ""
        return (f"what ran short: the address-space limit (RLIMIT_DATA) of {size(limit)}{used}"
                + ("" if at_limit else ", and the request would have passed it"))
    available = _available()
    parts = [p for p in (rss, f"{size(available)} available" if available is not None else None) if p]
    return "what ran short: the machine's memory" + (f" ({'; '.join(parts)})" if parts else "")
