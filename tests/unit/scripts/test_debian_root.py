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
                         "http://mirror.example/debian"]
    # A suite this debootstrap has no script for is built with sid's.
    if not (DEBOOTSTRAP_SCRIPTS / "trixie").exists():
        assert args[5:] == [str(DEBOOTSTRAP_SCRIPTS / "sid")]
    assert (root / STAMP).read_text().startswith("portal-root suite=trixie packages=")
    assert not (fake.roots / "trixie.tmp").exists()
    pkgs = installed(root)
    # What scripts/setup.sh chooses for the root's release (a Python 3.13, a torch 2),
    # without the groups a root leaves out; the copy of setup.sh is gone.
    for p in ("python3-dev", "python3-torch", "libgtest-dev", "passwd", "util-linux",
              "libpython3.13-testsuite", "libtorch-dev", "libclang-rt-dev"):
        assert p in pkgs
    for p in ("slurmd", "munge", "debootstrap"):
        assert p not in pkgs
    assert not (root / "root/.portal-setup.sh").exists()
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
    assert r.stdout == ("skipped: forky: scripts/setup.sh --packages-only: E: Unable to correct "
                        "problems, you have held broken packages. (python3-torch : Depends: "
                        "libtorch2.14 but it is not installable)\n")
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
    assert "trixie: scripts/setup.sh --packages-only: E: Unable to correct problems" in r.stderr


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



# --- the archive: the machine's own apt sources --------------------------------------

def debootstrap_mirror(fake):
    boots = fake.calls("debootstrap")
    assert len(boots) == 1, boots
    return boots[0].split()[4]


def test_the_archive_is_the_first_debian_stanza_of_the_machines_sources(fake):
    d = fake.apt_etc / "sources.list.d"
    (d / "vendor.sources").unlink()
    # Files are read in name order; stanzas of other archives and disabled ones do not count.
    (d / "a-security.sources").write_text(
        "Types: deb\nURIs: http://security.mirror.example/debian-security\n"
        "Suites: bookworm-security\nComponents: main\n\n"
        "Types: deb-src\nURIs: http://src.mirror.example/debian\nSuites: bookworm\n")
    (d / "b-node.sources").write_text(
        "Types: deb\nURIs: https://node.mirror.example/node_20.x\nSuites: nodistro\nComponents: main\n")
    (d / "c-debian.sources").write_text(
        "# the archive of this cloud\n"
        "Enabled: no\nTypes: deb\nURIs: http://disabled.mirror.example/debian\nSuites: bookworm\n\n"
        "Types: deb\n"
        "# http://snapshot.mirror.example/archive/debian/20250520T000000Z\n"
        "URIs: cdrom:/media/cd\n http://company.mirror.example/debian/\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")
    # sources.list is read only when no .sources names an archive
    (fake.apt_etc / "sources.list").write_text("deb http://list.mirror.example/debian bookworm main\n")
    r = fake(DEBIAN_ROOT, "trixie")
    assert r.returncode == 0, r.stderr
    assert debootstrap_mirror(fake) == "http://company.mirror.example/debian"


def test_the_archive_is_taken_from_sources_list_without_a_sources_file(fake):
    (fake.apt_etc / "sources.list.d" / "vendor.sources").unlink()
    (fake.apt_etc / "sources.list.d" / "cloud-sdk.list").write_text(
        "deb https://packages.mirror.example/apt cloud-sdk main\n")
    (fake.apt_etc / "sources.list").write_text(
        "# deb http://commented.mirror.example/debian bookworm main\n"
        "deb-src http://src.mirror.example/debian bookworm main\n"
        "deb http://security.mirror.example/debian-security bookworm-security main\n"
        "deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
        "https://list.mirror.example/debian/ stable main contrib\n")
    r = fake(DEBIAN_ROOT, "forky")
    assert r.returncode == 0, r.stderr
    assert debootstrap_mirror(fake) == "https://list.mirror.example/debian"


def test_portal_debian_mirror_overrides_the_machines_sources(fake):
    r = fake(DEBIAN_ROOT, "trixie", PORTAL_DEBIAN_MIRROR="http://override.mirror.example/debian")
    assert r.returncode == 0, r.stderr
    assert debootstrap_mirror(fake) == "http://override.mirror.example/debian"


def test_no_archive_in_the_machines_sources_is_a_failure_naming_the_setting(fake):
    (fake.apt_etc / "sources.list.d" / "vendor.sources").write_text(
        "Types: deb\nURIs: https://node.mirror.example/node_20.x\nSuites: nodistro\n")
    r = fake(DEBIAN_ROOT, "trixie")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("portal: root: trixie: no Debian archive in this machine's apt sources")
    assert "PORTAL_DEBIAN_MIRROR" in r.stderr
    assert fake.calls() == []


def test_a_change_of_setup_sh_tops_the_root_up(fake, tmp_path):
    # The root's packages are scripts/setup.sh's choice: its stamp follows that script.
    import shutil
    repo = tmp_path / "checkout"
    (repo / "scripts" / "lib").mkdir(parents=True)
    for name in ("debian-root.sh", "setup.sh", "lib/root-mounts.sh"):
        shutil.copy(REPO / "scripts" / name, repo / "scripts" / name)
    script = repo / "scripts" / "debian-root.sh"
    assert fake(script, "trixie").returncode == 0
    fake.calls()
    assert "reused" in fake(script, "trixie").stderr
    with open(repo / "scripts" / "setup.sh", "a") as f:
        f.write("# a new package\n")
    r = fake(script, "trixie")
    assert r.returncode == 0 and "topped up" in r.stderr, r.stderr
    assert any("--packages-only" in c for c in fake.calls("chroot"))


# --- no archive address anywhere in the project ---------------------------------------

def test_no_debian_archive_address_is_written_in_the_project():
    import re
    import subprocess
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True)
    if listed.returncode == 0:
        files = [REPO / f for f in listed.stdout.decode().split("\0") if f]
    else:  # not a git checkout (an exported tree)
        files = [p for p in REPO.rglob("*") if ".git" not in p.parts and "build" not in p.parts]
    address = re.compile(rb"[a-z0-9.-]*debian\.(org|net)\b", re.I)
    found = []
    for path in files:
        if not path.is_file() or path.is_symlink():
            continue
        for number, line in enumerate(path.read_bytes().splitlines(), 1):
            if address.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.decode(errors='replace').strip()}")
    assert found == [], "a Debian archive's address, where the machine's apt sources should be read:\n" + \
        "\n".join(found)
