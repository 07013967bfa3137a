"""python/_portal/rescue/hint.py: what a suspension suggests names the resource that ran
short and a size that fits what failed."""
import pytest

from _portal.rescue import hint, safepoint

GIB = 1 << 30
NUMPY = ("MemoryError: Unable to allocate 1.90 GiB for an array with shape (255013683,) "
         "and data type float64")
TORCH_CPU = ("RuntimeError: [enforce fail at alloc_cpu.cpp:75] . DefaultCPUAllocator: can't allocate "
             "memory: you tried to allocate 2040109465 bytes. Error code 12 (Cannot allocate memory)")
CUDA = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB "
        "(GPU 0; 15.78 GiB total capacity; 14.90 GiB already allocated)")


@pytest.fixture
def cap():
    """Sets the memory tripwire's cap as portal-run's --mem would."""
    saved = safepoint._memory_cap[0]
    yield lambda value: safepoint._memory_cap.__setitem__(0, value)
    safepoint._memory_cap[0] = saved


def test_the_failed_allocation_is_read_from_the_errors_words():
    assert hint.failed_request_bytes(NUMPY) == int(1.90 * GIB)
    assert hint.failed_request_bytes(TORCH_CPU) == 2040109465
    assert hint.failed_request_bytes(CUDA) == 20 << 20
    assert hint.failed_request_bytes("MemoryError") is None
    assert hint.failed_request_bytes(None) is None
    assert hint.failed_request_bytes("Tried to allocate " + "9" * 100000 + " GiB") is None


def test_a_cuda_error_is_a_gpu_shortage_and_asks_for_a_gpu():
    assert hint.is_gpu_shortage(CUDA)
    assert hint.is_gpu_shortage("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert not hint.is_gpu_shortage(NUMPY) and not hint.is_gpu_shortage(TORCH_CPU)
    line = hint.resume_line("train-3f9a2c", CUDA)
    assert "portal resume train-3f9a2c --gpu MODEL" in line and "--mem" not in line, line


def test_the_suggestion_is_twice_the_cap_and_never_below_what_failed(cap):
    cap(1 * GIB)
    assert hint.mem_gib("MemoryError") == 2                 # twice what it had
    # 1 GiB had + 1.9 GiB failed = 2.9 GiB: --mem 3G caps at 2.7 GiB, --mem 4G at 3.6 GiB
    assert hint.mem_gib(NUMPY) == 4
    assert hint.mem_gib(TORCH_CPU) == 4
    cap(8 * GIB)
    assert hint.mem_gib(NUMPY) == 16                        # twice covers it


def test_the_cap_is_portal_runs():
    # src/launcher/tripwire.cpp: a reserve of 10%, within [256 MiB, 1 GiB], at most half
    MIB = 1 << 20
    assert hint.cap_for(256 * MIB) == 128 * MIB             # half
    assert hint.cap_for(512 * MIB) == 256 * MIB             # half = the 256 MiB floor
    assert hint.cap_for(1 * GIB) == 768 * MIB               # what --mem 1G prints: 768.0 MiB
    assert hint.cap_for(2 * GIB) == 2 * GIB - 256 * MIB     # test_tripwire's CAP_2G
    assert hint.cap_for(10 * GIB) == 9 * GIB                # a tenth: 1 GiB
    assert hint.cap_for(64 * GIB) == 63 * GIB               # the 1 GiB ceiling
    for memory in (512 * MIB, 2560 * MIB, 2560 * MIB + 9, 10 * GIB, 64 * GIB):
        for c in (hint.cap_for(memory) - 1, hint.cap_for(memory), hint.cap_for(memory) + 1):
            least = hint.memory_for(c)
            assert hint.cap_for(least) >= c > hint.cap_for(least - 1), (memory, c)


@pytest.mark.parametrize("had, text, suggested", [
    # the allocation in GiB: whole GiB, never below 2G
    (768 << 20, "Unable to allocate 1.90 GiB for an array", "3G"),   # 2.65 GiB: --mem 3G caps at 2.7
    (768 << 20, "Unable to allocate 2.20 GiB for an array", "4G"),   # 2.95 GiB: 3G's 2.7 is short
    (768 << 20, "Unable to allocate 1.00 GiB for an array", "2G"),   # 1.75 GiB: 2G caps at exactly that
    (768 << 20, "Unable to allocate 1.01 GiB for an array", "3G"),   # a hair over 2G's cap
    (256 << 20, "Unable to allocate 1.00 KiB for an array", "2G"),   # a small one: the 2G floor
    (768 << 20, "MemoryError", "2G"),                                # no size: twice, in G
    (8 * GIB, "Unable to allocate 1.90 GiB for an array", "16G"),    # twice covers it
    (8 * GIB, "Unable to allocate 9.00 GiB for an array", "18G"),    # 17 GiB: 18G caps at 17 (1 GiB reserve)
    # in bytes (torch's CPU allocator): G
    (768 << 20, "you tried to allocate 2040109465 bytes. Error code 12", "3G"),
    # in MiB: M, rounded up to 256 MiB (numpy keeps the point: "600. MiB")
    (768 << 20, "Unable to allocate 600. MiB for an array", "1792M"),  # twice: 1536M; 1.34 GiB needs 1.6
    (256 << 20, "Unable to allocate 600. MiB for an array", "1280M"),  # 856 MiB: 1280M caps at 1024
    (256 << 20, "Unable to allocate 10.0 MiB for an array", "768M"),   # 266 MiB: 512M caps at 256
    # in TiB: T
    (64 * GIB, "Unable to allocate 3.00 TiB for an array", "4T"),
    (64 * GIB, "Unable to allocate 8.00 EiB for an array", "8388609T"),
])
def test_the_suggested_size_holds_what_it_had_and_what_failed(had, text, suggested):
    size, written = hint.mem_suggestion(text, had=had)
    assert written == suggested
    unit = {"M": 1 << 20, "G": GIB, "T": 1 << 40}[written[-1]]
    assert size == int(written[:-1]) * unit                      # what it says is what it is
    assert size >= 2 * had                                       # twice what it had
    failed = hint.failed_request_bytes(text)
    if failed:
        assert hint.cap_for(size) >= had + failed                # room for the failed one on top
        step = {"M": 256 << 20, "G": GIB, "T": 1 << 40}[written[-1]]
        floor = 2 * GIB if written[-1] == "G" else 0
        assert size - step < max(2 * had, floor) or hint.cap_for(size - step) < had + failed  # the least


def test_numpys_sizes_are_read_as_numpy_writes_them():
    numpy = pytest.importorskip("numpy")
    write = numpy.core._exceptions._ArrayMemoryError._size_to_string
    for n in (600 << 20, 2040109465, 1023 << 20, 3 << 40, 5 << 10):
        read = hint.failed_request_bytes(f"Unable to allocate {write(n)} for an array with shape ({n},)")
        assert read is not None and abs(read - n) <= n * 0.01, (write(n), read)


def test_a_size_this_machine_lacks_is_said_to_be_for_another(cap):
    machine = hint.machine_bytes()
    assert machine and machine > 0
    cap(machine)                                            # twice the machine: more than it has
    line = hint.resume_line("train-3f9a2c", "MemoryError")
    gib = -(-2 * machine // GIB)
    assert line == (f"resume it on a machine with more memory: portal resume train-3f9a2c --mem {gib}G "
                    f"(this machine has {machine / GIB:.1f} GiB: on another one, or with --on slurm)")
    cap(256 << 20)
    line = hint.resume_line("train-3f9a2c", "MemoryError")
    if 2 * GIB <= machine:
        assert line == "resume it on a machine with more memory: portal resume train-3f9a2c --mem 2G"
