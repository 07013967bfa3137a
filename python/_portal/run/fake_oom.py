"""PORTAL_FAKE_OOM: make a job run out of memory at a chosen line, for tests.

    PORTAL_FAKE_OOM=SPEC[,SPEC...]      SPEC = PATH_SUFFIX:LINE[@HIT][=KIND]

When a statement that starts on line LINE of a file whose path ends with the whole
parts PATH_SUFFIX (`t.py`: a file named t.py, not dist.py) begins for the HIT-th
time (default 1) in the job's whole life, it raises KIND instead of running:

    memory  MemoryError (the default)
    torch   torch's OutOfMemoryError (torch.cuda.OutOfMemoryError in torch 1.13)
    cuda    RuntimeError("CUDA out of memory. Tried to allocate ...")
    cpu     the CPU allocator's RuntimeError ("... DefaultCPUAllocator: can't allocate memory ...")
    other   a RuntimeError that is not out of memory

The hit counts are part of the job's saved state, so a spec fires at most once
per job, across suspensions and resumptions.  The instrumenter inserts the
trigger, `__portal_fake_oom__(I)`, before each matching statement (one call with
all their indexes, `__portal_fake_oom__((I, J))`, for several specs of one line:
each counts every start of the line); nothing is inserted, and nothing costs
anything, when the variable is unset.
"""
import os

from _portal import job_contract  # the environment variables' names (contract/job_record.json)

KINDS = ("memory", "torch", "cuda", "cpu", "other")


class FakeOomSpecError(ValueError):
    pass


class Spec:
    __slots__ = ("suffix", "line", "hit", "kind")

    def __init__(self, suffix, line, hit=1, kind="memory"):
        self.suffix, self.line, self.hit, self.kind = suffix, line, hit, kind

    def __eq__(self, other):
        return isinstance(other, Spec) and (self.suffix, self.line, self.hit, self.kind) == (
            other.suffix, other.line, other.hit, other.kind)

    def __repr__(self):
        return f"Spec({self.suffix!r}, {self.line}, hit={self.hit}, kind={self.kind!r})"

    def matches(self, filename):
        """Whether the file is the one meant: the suffix names whole trailing parts of
        its path (`t.py` is /w/t.py, never a library's /x/dist.py, whose line would
        take the spec's hits, and an error a library catches would swallow it)."""
        if not filename.endswith(self.suffix):
            return False
        rest = filename[:len(filename) - len(self.suffix)]
        return not rest or rest.endswith("/") or self.suffix.startswith("/")


def parse(text):
    """Parse PORTAL_FAKE_OOM's value; raise FakeOomSpecError naming the bad spec."""
    specs = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        body, _, kind = item.partition("=")
        kind = kind or "memory"
        if kind not in KINDS:
            raise FakeOomSpecError(f"{item!r}: kind {kind!r} is not one of {', '.join(KINDS)}")
        where, _, hit = body.partition("@")
        suffix, sep, line = where.rpartition(":")
        try:
            line_no = int(line)
            hit_no = int(hit) if hit else 1
        except ValueError:
            raise FakeOomSpecError(f"{item!r}: expected PATH_SUFFIX:LINE[@HIT][=KIND]") from None
        if not sep or not suffix or line_no < 1 or hit_no < 1:
            raise FakeOomSpecError(f"{item!r}: expected PATH_SUFFIX:LINE[@HIT][=KIND]")
        specs.append(Spec(suffix, line_no, hit_no, kind))
    return specs


def make_exception(kind):
    if kind == "memory":
        return MemoryError()
    if kind == "torch":
        import torch
        oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
        return oom("CUDA out of memory. Tried to allocate 2.00 GiB (fake, PORTAL_FAKE_OOM)")
    if kind == "cuda":
        return RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (fake, PORTAL_FAKE_OOM)")
    if kind == "cpu":
        return RuntimeError(
            "[enforce fail at alloc_cpu.cpp:75] data. DefaultCPUAllocator: can't allocate memory: "
            "you tried to allocate 8589934592 bytes. Error code 12 (Cannot allocate memory)")
    return RuntimeError("fake error that is not out of memory (PORTAL_FAKE_OOM)")


class FakeOom:
    """The armed fixture: the specs, and the hit counts that travel with the job."""

    def __init__(self, specs, counts=None):
        self.specs = list(specs)
        self.counts = list(counts) if counts is not None else [0] * len(self.specs)

    @classmethod
    def from_environment(cls, environ=os.environ):
        text = environ.get(job_contract.ENV_FAKE_OOM)
        return cls(parse(text)) if text else None

    def lines_for(self, filename):
        """[(spec index, line)] of the specs that apply to `filename`."""
        return [(i, s.line) for i, s in enumerate(self.specs) if s.matches(filename)]

    def arm(self):
        import builtins
        from _portal import _frames
        _frames.fake_oom_configure(self.counts, [s.hit for s in self.specs],
                                   lambda i: make_exception(self.specs[i].kind))
        builtins.__portal_fake_oom__ = _frames.fake_oom_tick
