"""scripts/lane.sh and scripts/test.sh with the fakes of conftest.py: usage
errors, a lane whose archive gives no root is skipped (status 3) and does not fail
CI, a lane sets up and builds through scripts/setup.sh, a configure failure names
CMake's error and the project file, each lane ends
with CTest's summary line, the source is mounted read-only and every mount is
undone; CI fails when a lane fails."""
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
LANE = REPO / "scripts" / "lane.sh"
TEST_SH = REPO / "scripts" / "test.sh"
STATUS_USAGE = 2
STATUS_SKIPPED = 3


@pytest.mark.skipif(os.geteuid() != 0, reason="a Debian-root lane runs as root (chroot, mounts)")
def test_a_lane_of_a_misspelt_suite_fails(fake):
    r = fake(LANE, "trixy")
    assert r.returncode == 1
    assert r.stdout.splitlines()[-1].startswith("lane trixy: failed to set up the root")


@pytest.mark.parametrize("args", [[], ["trixie", "--frobnicate"], ["trixie", "--quick"]])
def test_lane_usage_errors(fake, args):
    r = fake(LANE, *args)
    assert r.returncode == STATUS_USAGE
    assert r.stderr.startswith("portal: lane: usage: ")


@pytest.mark.skipif(os.geteuid() != 0, reason="a Debian-root lane runs as root (chroot, mounts)")
def test_lane_of_an_archive_that_gives_no_root_is_skipped_not_failed(fake):
    r = fake(LANE, "forky", FAKE_DEBOOTSTRAP_FAIL="1")
    assert r.returncode == STATUS_SKIPPED, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "skipped: forky: debootstrap: E: Couldn't find these debs: libc6"
    assert lines[-1].startswith("lane forky: skipped (the Debian archive, not Portal")
    assert fake.calls("chroot") == []


CMAKE_ERROR = """\
-- The CXX compiler identification is GNU 14.2.0
CMake Error at /usr/share/cmake-3.31/Modules/FindPackageHandleStandardArgs.cmake:233 (message):
  Could NOT find Python: Found unsuitable version "3.13.5", but required is
  exact version "3.11" (found /usr/bin/python3)
Call Stack (most recent call first):
  /usr/share/cmake-3.31/Modules/FindPython.cmake:673 (find_package_handle_standard_args)
  cmake/PortalPython.cmake:11 (find_package)
  CMakeLists.txt:16 (include)


-- Configuring incomplete, errors occurred!
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="a Debian-root lane runs as root (chroot, mounts)")
def test_lane_that_cannot_configure_fails_naming_cmakes_error_and_where(fake, tmp_path):
    error = tmp_path / "cmake-error.txt"
    error.write_text(CMAKE_ERROR)
    r = fake(LANE, "trixie", FAKE_LANE="configure-fails", FAKE_CMAKE_ERROR=str(error))
    assert r.returncode == 1, r.stdout + r.stderr
    last = r.stdout.splitlines()[-1]
    assert last.startswith('lane trixie: failed at configure: Could NOT find Python: Found '
                           'unsuitable version "3.13.5", but required is exact version "3.11" '
                           '(found /usr/bin/python3) (at cmake/PortalPython.cmake:11) ['), last
    assert "skipped" not in r.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="a Debian-root lane runs as root (chroot, mounts)")
def test_lane_whose_setup_cannot_install_fails_with_apts_reason(fake):
    r = fake(LANE, "trixie", FAKE_LANE="setup-fails")
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1].startswith(
        "lane trixie: failed at setup: E: Unable to locate package libpython3.13-testsuite ["), r.stdout
    assert fake.calls("chroot") and not Path(str(fake.log) + ".ctest").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="a Debian-root lane runs as root (chroot, mounts)")
@pytest.mark.parametrize("mode, status, summary", [
    ("tests-fail", 1, "95% tests passed, 1 tests failed out of 20: e2e.training"),
    ("pass", 0, "100% tests passed, 0 tests failed out of 20"),
])
def test_lane_ends_with_ctests_summary_line(fake, mode, status, summary):
    r = fake(LANE, "trixie", FAKE_LANE=mode, PORTAL_LANE_CTEST_ARGS="-R ^(unit|e2e\\.data)$")
    assert r.returncode == status, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1].startswith(f"lane trixie: {summary} [")
    calls = fake.calls()
    # The lane sets up and builds through the README's scripts/setup.sh, as the root's
    # packages were installed (the same groups left out), into its own build directory.
    setup = [c for c in calls if c.startswith("chroot ") and "/portal-src/scripts/setup.sh" in c]
    assert len(setup) == 1, calls
    for part in ("BUILD_DIR=/portal-build ", "PREFIX=/portal-build/prefix ",
                 "PORTAL_SETUP_WITHOUT='slurm lanes' "):
        assert part in setup[0]
    assert any("--packages-only" in c and "PORTAL_SETUP_WITHOUT=slurm lanes" in c for c in calls)
    # Source read-only, the lane's build dir and a private /tmp mounted, all unmounted.
    root = fake.roots / "trixie"
    assert any(c.startswith("mount -o remount,bind,ro") and c.endswith(f"{root}/portal-src")
               for c in calls), calls
    assert any(c.startswith("mount --bind ") and c.endswith(f"{root}/tmp") for c in calls)
    mounted = {c.split()[-1] for c in calls if c.startswith(("mount -t", "mount --bind", "mount --rbind"))}
    unmounted = {c.split()[-1] for c in calls if c.startswith("umount")}
    assert mounted and mounted <= unmounted
    ctest = Path(str(fake.log) + ".ctest").read_text()
    assert "PORTAL_PYTHON=/usr/bin/python3" in ctest
    # PORTAL_LANE_CTEST_ARGS reach CTest as they were given, shell characters and all.
    args = Path(str(fake.log) + ".ctest-args").read_text().splitlines()
    assert args[0] == "--output-on-failure" and args[-2:] == ["-R", "^(unit|e2e\\.data)$"]


@pytest.mark.skipif(os.geteuid() != 0, reason="a Debian-root lane runs as root (chroot, mounts)")
def test_ci_fails_on_a_failed_lane_and_not_on_a_skipped_one(fake):
    r = fake(TEST_SH, PORTAL_CI_LANES="forky", FAKE_DEBOOTSTRAP_FAIL="1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1].startswith("lanes: 0 passed, 0 failed, 1 skipped, in ")
    assert "lane forky: skipped in " in r.stdout
    r = fake(TEST_SH, PORTAL_CI_LANES="trixie forky", FAKE_LANE="tests-fail")
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    # Each lane's own last line, then one line per lane, the overall line last.
    assert lines[-1].startswith("lanes: 0 passed, 2 failed, 0 skipped, in ")
    assert lines[-3].startswith("lane trixie: FAILED in ") and lines[-2].startswith("lane forky: FAILED in ")
    assert sum(line.startswith("lane trixie: 95% tests passed, 1 tests failed out of 20")
               for line in lines) == 1
    r = fake(TEST_SH, PORTAL_CI_LANES="trixie", FAKE_LANE="pass")
    assert r.returncode == 0 and r.stdout.splitlines()[-1].startswith("lanes: 1 passed, 0 failed")



@pytest.mark.skipif(os.geteuid() != 0, reason="a Debian-root lane runs as root (chroot, mounts)")
def test_ci_builds_every_root_before_the_first_lane_needs_one(fake):
    # The roots are made in the background from the start (beside the host lane, when it
    # runs first), so forky's debootstrap comes before trixie's suite, not after it.
    r = fake(TEST_SH, PORTAL_CI_LANES="trixie forky", FAKE_LANE="pass")
    assert r.returncode == 0, r.stdout + r.stderr
    calls = fake.calls()
    made = [i for i, line in enumerate(calls) if line.startswith("debootstrap ")]
    suites = [i for i, line in enumerate(calls) if line.startswith("chroot ") and " ctest " in line]
    assert len(made) == 2 and "forky" in calls[made[1]], calls
    assert suites and made[1] < suites[0], calls
    assert r.stdout.splitlines()[-1].startswith("lanes: 2 passed, 0 failed")


@pytest.mark.parametrize("tests, demo, status", [(0, 0, 0), (1, 0, 1), (0, 1, 1), (1, 1, 1)])
def test_ci_runs_the_readmes_test_command_then_its_main_command(tmp_path, tests, demo, status):
    # .ci/run in a checkout whose scripts/test.sh and scripts/demo.sh only say they ran:
    # both always run, in that order, and CI fails if either failed.
    import shutil
    import subprocess
    (tmp_path / ".ci").mkdir()
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / ".ci" / "run", tmp_path / ".ci" / "run")
    ran = tmp_path / "ran"
    for name, code in (("test.sh", tests), ("demo.sh", demo)):
        (tmp_path / "scripts" / name).write_text(f'echo {name} >>"{ran}"; exit {code}\n')
    r = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], capture_output=True, text=True, timeout=60)
    assert r.returncode == status, r.stdout + r.stderr
    assert ran.read_text().split() == ["test.sh", "demo.sh"]
    assert r.stdout.splitlines()[-1].startswith("demo: passed in " if demo == 0 else "demo: FAILED (status 1) in ")
