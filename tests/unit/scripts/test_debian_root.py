"""scripts/debian-root.sh's own logic, with fake debootstrap, chroot, mount and
umount first on PATH (no network, no root, nothing mounted): a root is built in
SUITE.tmp and renamed, reused while its stamp matches the package list, topped up
in place when the list changed or the stamp is missing (a root built by hand), and
an archive that cannot give a root is one `skipped:` line and status 3, the
half-built root discarded.  And scripts/lane.sh's usage and skipped lane.
"""
import os
import stat
import subprocess
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
DEBIAN_ROOT = REPO / "scripts" / "debian-root.sh"
LANE = REPO / "scripts" / "lane.sh"
STAMP = ".portal-root-stamp"
STATUS_USAGE = 2
STATUS_SKIPPED = 3
DEBOOTSTRAP_SCRIPTS = Path("/usr/share/debootstrap/scripts")

# Each fake appends "NAME ARGS..." to $FAKE_LOG.
FAKES = {
    "debootstrap": r"""
        echo "debootstrap $*" >>"$FAKE_LOG"
        if [ -n "${FAKE_DEBOOTSTRAP_FAIL:-}" ]; then
          echo "I: Retrieving InRelease"
          echo "E: Couldn't find these debs: libc6" >&2
          exit 1
        fi
        dir=$3
        mkdir -p "$dir/usr/bin" "$dir/usr/sbin" "$dir/etc/apt/apt.conf.d" "$dir/proc"
        printf '#!/bin/sh\n' >"$dir/usr/bin/apt-get"; chmod 755 "$dir/usr/bin/apt-get"
        echo 13.0 >"$dir/etc/debian_version"
    """,
    # chroot DIR CMD...: apt-get install records its packages in DIR; python3 says 3.13.
    "chroot": r"""
        dir=$1; shift
        echo "chroot $dir $*" >>"$FAKE_LOG"
        case " $* " in
          *"cmake -S "*)
            if [ "${FAKE_LANE:-}" = configure-fails ]; then cat "$FAKE_CMAKE_ERROR"; exit 1; fi
            echo "-- Configuring done" ;;
          *"cmake --build "*) echo "[100%] Built target portal-run" ;;
          *" ctest "*)
            echo "$*" >>"$FAKE_LOG.ctest"
            if [ "${FAKE_LANE:-}" = tests-fail ]; then
              echo "95% tests passed, 1 tests failed out of 20"; echo; echo "The following tests FAILED:"
              echo "	 12 - e2e.training (Failed)"; exit 8
            fi
            echo "100% tests passed, 0 tests failed out of 20" ;;
          *" --version"*) echo "Python 3.13.5" ;;
          *" -c "*) echo 3.13 ;;
          *" apt-get install "*)
            if [ -n "${FAKE_APT_FAIL:-}" ]; then
              echo "Some packages could not be installed."
              echo " python3-torch : Depends: libtorch2.14 but it is not installable"
              echo "E: Unable to correct problems, you have held broken packages."
              exit 100
            fi
            for a in "$@"; do case "$a" in -*|*=*|/*|apt-get|install) ;; *) echo "$a" >>"$dir/installed";; esac; done ;;
        esac
    """,
    "mount": r"""echo "mount $*" >>"$FAKE_LOG" """,
    "umount": r"""echo "umount $*" >>"$FAKE_LOG" """,
}


@pytest.fixture
def fake(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in FAKES.items():
        path = bin_dir / name
        path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "calls.log"
    log.touch()
    roots = tmp_path / "roots"

    def run(script, *args, **env):
        environ = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", FAKE_LOG=str(log),
                       PORTAL_ROOTS=str(roots), PORTAL_LANES_BUILD=str(tmp_path / "builds"),
                       # the fakes mount nothing: no private namespace needed
                       PORTAL_ROOT_NAMESPACE="1")
        environ.pop("PORTAL_ROOT_EXTRA_PACKAGES", None)
        environ.update(env)
        return subprocess.run(["bash", str(script), *args], env=environ, capture_output=True,
                              text=True, timeout=60)

    def calls(prefix=""):
        lines = log.read_text().splitlines()
        log.write_text("")
        return [line for line in lines if line.startswith(prefix)]

    run.calls = calls
    run.roots = roots
    run.log = log
    return run


def installed(root):
    return (root / "installed").read_text().split()


def test_a_new_root_is_built_in_tmp_stamped_and_renamed(fake):
    r = fake(DEBIAN_ROOT, "trixie")
    assert r.returncode == 0, r.stderr
    root = fake.roots / "trixie"
    boots = fake.calls("debootstrap")
    assert len(boots) == 1
    args = boots[0].split()
    assert args[1:5] == ["--variant=minbase", "trixie", str(fake.roots / "trixie.tmp"),
                         "http://deb.debian.org/debian"]
    # A suite this debootstrap has no script for is built with sid's.
    if not (DEBOOTSTRAP_SCRIPTS / "trixie").exists():
        assert args[5:] == [str(DEBOOTSTRAP_SCRIPTS / "sid")]
    assert (root / STAMP).read_text().startswith("portal-root suite=trixie packages=")
    assert not (fake.roots / "trixie.tmp").exists()
    pkgs = installed(root)
    for p in ("python3-dev", "python3-torch", "libgtest-dev", "passwd", "util-linux",
              "libpython3.13-testsuite"):
        assert p in pkgs
    # Services never start in the root, and the policy is gone once it is done.
    assert not (root / "usr/sbin/policy-rc.d").exists()
    # Stable suites keep apt's Valid-Until check.
    assert not (root / "etc/apt/apt.conf.d/99portal-valid-until").exists()


def test_a_complete_root_is_reused_untouched(fake):
    assert fake(DEBIAN_ROOT, "trixie").returncode == 0
    fake.calls()
    r = fake(DEBIAN_ROOT, "trixie")
    assert r.returncode == 0, r.stderr
    assert "reused" in r.stderr
    assert fake.calls() == []  # no debootstrap, no apt, no mount


def test_a_changed_package_list_tops_up_in_place(fake):
    assert fake(DEBIAN_ROOT, "trixie").returncode == 0
    root = fake.roots / "trixie"
    old_stamp = (root / STAMP).read_text()
    (root / "kept").write_text("a file of the root's user")
    fake.calls()
    r = fake(DEBIAN_ROOT, "trixie", PORTAL_ROOT_EXTRA_PACKAGES="libtorch-dev")
    assert r.returncode == 0, r.stderr
    assert "topped up" in r.stderr
    assert fake.calls("debootstrap") == []
    assert (root / "kept").exists()
    assert "libtorch-dev" in installed(root)
    assert (root / STAMP).read_text() != old_stamp
    # ... and that list's root is then reused as it is.
    r = fake(DEBIAN_ROOT, "trixie", PORTAL_ROOT_EXTRA_PACKAGES="libtorch-dev")
    assert "reused" in r.stderr and fake.calls("chroot") == []


def test_a_root_built_by_hand_without_stamp_is_topped_up_not_rebuilt(fake):
    root = fake.roots / "trixie"
    for d in ("usr/bin", "usr/sbin", "etc/apt/apt.conf.d", "proc"):
        (root / d).mkdir(parents=True)
    (root / "usr/bin/apt-get").write_text("#!/bin/sh\n")
    (root / "usr/bin/apt-get").chmod(0o755)
    (root / "etc/debian_version").write_text("13.8\n")
    (root / "work-of-another-engineer").write_text("x")
    r = fake(DEBIAN_ROOT, "trixie")
    assert r.returncode == 0, r.stderr
    assert fake.calls("debootstrap") == []
    assert (root / "work-of-another-engineer").exists()
    assert "python3-torch" in installed(root)
    assert (root / STAMP).exists()


def test_a_leftover_tmp_of_a_crashed_build_is_discarded(fake):
    tmp = fake.roots / "forky.tmp"
    tmp.mkdir(parents=True)
    (tmp / "half-built").write_text("x")
    r = fake(DEBIAN_ROOT, "forky")
    assert r.returncode == 0, r.stderr
    root = fake.roots / "forky"
    assert not (root / "half-built").exists() and not tmp.exists()
    # Debian testing's Release file may be past its Valid-Until on the mirror.
    conf = root / "etc/apt/apt.conf.d/99portal-valid-until"
    assert conf.read_text().strip() == 'Acquire::Check-Valid-Until "false";'


def test_debootstrap_failing_is_one_skipped_line_and_status_3(fake):
    r = fake(DEBIAN_ROOT, "forky", FAKE_DEBOOTSTRAP_FAIL="1")
    assert r.returncode == STATUS_SKIPPED, r.stderr
    assert r.stdout == "skipped: forky: debootstrap: E: Couldn't find these debs: libc6\n"
    assert not (fake.roots / "forky").exists() and not (fake.roots / "forky.tmp").exists()


def test_apt_failing_in_a_new_root_skips_with_the_broken_dependency(fake):
    r = fake(DEBIAN_ROOT, "forky", FAKE_APT_FAIL="1")
    assert r.returncode == STATUS_SKIPPED, r.stderr
    assert r.stdout == ("skipped: forky: apt-get install: E: Unable to correct problems, you have "
                        "held broken packages. (python3-torch : Depends: libtorch2.14 but it is "
                        "not installable)\n")
    assert not (fake.roots / "forky").exists() and not (fake.roots / "forky.tmp").exists()
    # Nothing stays mounted: every mount has its umount.
    calls = fake.calls()
    mounts = [c for c in calls if c.startswith("mount -t proc")]
    assert mounts and len([c for c in calls if c.startswith("umount")]) >= len(mounts)


def test_apt_failing_in_a_top_up_keeps_the_root_without_stamp(fake):
    assert fake(DEBIAN_ROOT, "forky").returncode == 0
    root = fake.roots / "forky"
    r = fake(DEBIAN_ROOT, "forky", FAKE_APT_FAIL="1", PORTAL_ROOT_EXTRA_PACKAGES="libtorch-dev")
    assert r.returncode == STATUS_SKIPPED
    assert r.stdout.startswith("skipped: forky: apt-get install: ")
    assert (root / "etc/debian_version").exists()
    assert not (root / STAMP).exists()  # incomplete: topped up again next time


def test_a_root_others_can_write_into_is_refused(fake):
    fake.roots.mkdir()
    fake.roots.chmod(0o777)
    r = fake(DEBIAN_ROOT, "trixie")
    assert r.returncode == 1
    assert r.stderr.startswith(f"portal: root: {fake.roots}: owned by uid {os.getuid()} with mode 777: ")
    assert fake.calls() == []
    fake.roots.chmod(0o755)
    (fake.roots / "trixie").mkdir(mode=0o775)
    (fake.roots / "trixie").chmod(0o775)
    r = fake(DEBIAN_ROOT, "trixie")
    assert r.returncode == 1 and "trixie: owned by uid" in r.stderr
    assert fake.calls() == []


@pytest.mark.parametrize("args", [[], ["Trixie"], ["../etc"], ["a", "b"]])
def test_a_bad_suite_is_a_usage_error(fake, args):
    r = fake(DEBIAN_ROOT, *args)
    assert r.returncode == STATUS_USAGE
    assert r.stderr.startswith("portal: root: usage: ")
    assert fake.calls() == []


def test_a_misspelt_suite_is_a_usage_error_not_a_skip(fake):
    r = fake(DEBIAN_ROOT, "trixy")
    assert r.returncode == STATUS_USAGE
    assert r.stdout == ""
    assert r.stderr.startswith("portal: root: trixy: not a suite Portal's lanes use")
    assert fake.calls() == []
    r = fake(DEBIAN_ROOT, "trixy", PORTAL_ROOT_ANY_SUITE="1")
    assert r.returncode == 0 and (fake.roots / "trixy" / STAMP).exists()


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
@pytest.mark.parametrize("mode, status, summary", [
    ("tests-fail", 1, "95% tests passed, 1 tests failed out of 20: e2e.training"),
    ("pass", 0, "100% tests passed, 0 tests failed out of 20"),
])
def test_lane_ends_with_ctests_summary_line(fake, mode, status, summary):
    r = fake(LANE, "trixie", FAKE_LANE=mode, PORTAL_LANE_CTEST_ARGS="-R unit")
    assert r.returncode == status, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1].startswith(f"lane trixie: {summary} [")
    calls = fake.calls()
    # Source read-only, the lane's build dir and a private /tmp mounted, all unmounted.
    root = fake.roots / "trixie"
    assert any(c.startswith("mount -o remount,bind,ro") and c.endswith(f"{root}/portal-src")
               for c in calls), calls
    assert any(c.startswith("mount --bind ") and c.endswith(f"{root}/tmp") for c in calls)
    mounted = {c.split()[-1] for c in calls if c.startswith(("mount -t", "mount --bind", "mount --rbind"))}
    unmounted = {c.split()[-1] for c in calls if c.startswith("umount")}
    assert mounted and mounted <= unmounted
    ctest = Path(str(fake.log) + ".ctest").read_text()
    assert "ctest --output-on-failure" in ctest and "-R unit" in ctest
    assert "PORTAL_PYTHON=/usr/bin/python3" in ctest
