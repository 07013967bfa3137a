"""shortage.py: the suspension's "what ran short" line, from /proc/self/status and
/proc/self/limits as the rescue noted them (the Rescuer's note_shortage)."""
import pytest

from _portal.rescue import entry as rescue, shortage

MiB = 1 << 20


def size(n):
    return f"{n / MiB:.1f} MiB"


def noted(rss_mib, data_mib, limit):
    status = f"Name:\tpython3\nVmData:\t{data_mib * 1024} kB\nRssAnon:\t{rss_mib * 1024} kB\n".encode()
    soft = "unlimited" if limit is None else str(limit)
    limits = (f"Limit                     Soft Limit           Hard Limit           Units     \n"
              f"Max data size             {soft:<21}unlimited            bytes     \n").encode()
    return status, limits


def test_nothing_noted_no_line():
    assert shortage.line(None, 768 * MiB, size) is None


def test_resident_cap_the_lowered_limit_reached():
    seen = noted(740, 800, 805 * MiB)
    assert shortage.line(seen, 768 * MiB, size) == (
        "what ran short: the address-space limit the memory tripwire sets near its cap of 768.0 MiB "
        "(RLIMIT_DATA 805.0 MiB, 800.0 MiB of it in use; resident memory 740.0 MiB)")


def test_resident_cap_a_big_request_refused():
    seen = noted(700, 900, 30000 * MiB)
    assert shortage.line(seen, 768 * MiB, size) == (
        "what ran short: the memory tripwire's cap of 768.0 MiB: resident memory 700.0 MiB, "
        "and the request would have passed it")


@pytest.mark.parametrize("data,tail", [(767, ""), (600, ", and the request would have passed it")])
def test_address_cap(data, tail):
    seen = noted(500, data, 768 * MiB)
    assert shortage.line(seen, None, size) == (
        f"what ran short: the address-space limit (RLIMIT_DATA) of 768.0 MiB: {data}.0 MiB of it in use{tail}")


def test_no_cap_the_machine():
    seen = noted(500, 600, None)
    text = shortage.line(seen, None, size)
    assert text.startswith("what ran short: the machine's memory (resident memory 500.0 MiB; ") and \
        text.endswith(" available)")


def test_the_noted_files_are_the_process_own():
    rescuer = rescue.Rescuer(runtime=None)
    rescuer.note_shortage()
    status, limits = rescuer.shortage
    assert b"\nVmData:" in status and b"\nMax data size" in limits
