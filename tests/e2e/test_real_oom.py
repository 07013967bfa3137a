"""Real out-of-memory errors are rescued (issue 25): each case of the matrix
(real_oom_cases.py) grows its state until it really runs out - under --mem 512M,
1G or 2G with either cap, or in a 1 GiB memory cgroup without --mem - is
suspended, and `portal resume JOB --mem 8G` in a new process finishes it with
python's output byte for byte (a digest of the final state on its last line).
No PORTAL_FAKE_OOM anywhere: the rescue itself runs short of memory, as it would
in a real job.
"""
import pytest

from real_oom_cases import CASES, cgroup_unavailable, importable, python_output, run_case


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_real_shortage_is_rescued_and_resumed(case, tmp_path, portal_run, portal_cli):
    if case.needs() and not importable(case.needs()):
        pytest.skip(f"{case.needs()} is not installed")
    if case.mem is None:
        why = cgroup_unavailable()
        if why:
            pytest.skip(why)
    expected = python_output(case, tmp_path, timeout=240)
    outcome = run_case(case, expected, portal_run, portal_cli, tmp_path)
    assert outcome.ok, outcome.why
