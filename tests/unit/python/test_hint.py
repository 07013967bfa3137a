"""python/_portal/hint.py: what a suspension suggests names the resource that ran
short and a size that fits what failed."""
import pytest

from _portal import hint, safepoint

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
    assert hint.mem_gib(NUMPY) == 3                         # 1 GiB had + 1.9 GiB failed: not 2
    assert hint.mem_gib(TORCH_CPU) == 3
    cap(8 * GIB)
    assert hint.mem_gib(NUMPY) == 16                        # twice covers it


def test_a_size_this_machine_lacks_is_said_to_be_for_another(cap):
    machine = hint.machine_bytes()
    assert machine and machine > 0
    cap(machine)                                            # twice the machine: more than it has
    line = hint.resume_line("train-3f9a2c", "MemoryError")
    gib = -(-2 * machine // GIB)
    assert line == (f"resume it on a machine with more memory: portal resume train-3f9a2c --mem {gib} "
                    f"(this machine has {machine / GIB:.1f} GiB: on another one, or with --on slurm)")
    cap(256 << 20)
    line = hint.resume_line("train-3f9a2c", "MemoryError")
    if 2 * GIB <= machine:
        assert line == "resume it on a machine with more memory: portal resume train-3f9a2c --mem 2"
