"""scripts/debian-root.sh's own logic, with the fakes of conftest.py: a root is
built in SUITE.tmp and renamed, reused while its stamp matches the package list,
topped up in place when the list changed or the stamp is missing (a root built by
hand), and an archive that cannot give a root is one `skipped:` line and status 3,
the half-built root discarded; a misspelt suite or a root others can write into is
refused."""
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
DEBIAN_ROOT = REPO / "scripts" / "debian-root.sh"
STAMP = ".portal-root-stamp"
STATUS_USAGE = 2
STATUS_SKIPPED = 3
DEBOOTSTRAP_SCRIPTS = Path("/usr/share/debootstrap/scripts")


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


def test_a_stable_suite_that_cannot_be_built_fails_and_is_not_skipped(fake):
    r = fake(DEBIAN_ROOT, "trixie", FAKE_DEBOOTSTRAP_FAIL="1")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.splitlines()[-1].startswith(
        "portal: root: trixie: debootstrap: E: Couldn't find these debs: libc6 (a stable suite: "
        "not skipped; the full log: ")
    assert not (fake.roots / "trixie").exists() and not (fake.roots / "trixie.tmp").exists()
    r = fake(DEBIAN_ROOT, "trixie", FAKE_APT_FAIL="1")
    assert r.returncode == 1 and r.stdout == ""
    assert "trixie: apt-get install: E: Unable to correct problems" in r.stderr


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

