"""scripts/setup.sh's choice of packages (--packages-only), with the fakes of
conftest.py: on each Debian release the packages named after a version are those
of that release's python3 and torch (never Debian 12's names elsewhere), what is
present is not installed again (no `apt-get update` when nothing is missing), a
group can be left out, services cannot start while installing, and a failed
install says apt's reason."""
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SETUP = REPO / "scripts" / "setup.sh"

# (release, python3's version, python3-torch's version): Debian 12, 13, testing.
RELEASES = [("bookworm", "3.11", "1.13.1+dfsg-4"), ("trixie", "3.13", "2.6.0+dfsg-7"),
            ("forky", "3.14", "2.14.0+dfsg-1")]


def installed(fake):
    return fake.dpkg.read_text().split() if fake.dpkg.exists() else []


@pytest.mark.parametrize("release, pyver, torch", RELEASES)
def test_the_packages_are_chosen_for_the_release(fake, release, pyver, torch):
    r = fake(SETUP, "--packages-only", FAKE_PYVER=pyver, FAKE_TORCH=torch)
    assert r.returncode == 0, r.stderr
    pkgs = installed(fake)
    for p in ("g++", "cmake", "clang", "libclang-rt-dev", "python3", "python3-dev", "python3-torch",
              "python3-numpy", "libgtest-dev", "slurmd", "munge", "debootstrap",
              f"libpython{pyver}-testsuite"):
        assert p in pkgs, (p, pkgs)
    # Nothing named after another release's versions (Debian 12's clang 14, python 3.11).
    others = [v for _, v, _ in RELEASES if v != pyver]
    assert [p for p in pkgs if any(v in p for v in others) or "-14-" in p] == []
    # torch.compile's headers from torch 2 on; torch 1.13 has no torch.compile.
    assert ("libtorch-dev" in pkgs) == (not torch.startswith("1."))
    log = fake.calls()
    calls = [c for c in log if c.startswith("apt-get")]
    # One update, then the version-free packages, then those named after python3 and torch.
    assert calls[0].startswith("apt-get update") and sum(c.startswith("apt-get update") for c in calls) == 1
    installs = [c for c in calls if c.startswith("apt-get install")]
    assert len(installs) == 2 and f"libpython{pyver}-testsuite" in installs[1].split()
    # Services were kept from starting while installing, and the policy is gone after.
    assert "policy-rc.d present" in log  # logged by the fake apt-get
    assert not Path(fake.log.parent / "policy-rc.d").exists()
    assert r.stderr.startswith("portal: setup: installing ")


def test_nothing_missing_means_no_apt_at_all(fake):
    assert fake(SETUP, "--packages-only").returncode == 0
    fake.calls()
    r = fake(SETUP, "--packages-only")
    assert r.returncode == 0, r.stderr
    assert fake.calls("apt-get") == []
    assert r.stderr == "portal: setup: all Debian packages present (and libpython3.13-testsuite libtorch-dev)\n"


def test_a_package_gone_is_installed_alone(fake):
    assert fake(SETUP, "--packages-only").returncode == 0
    fake.dpkg.write_text("\n".join(p for p in installed(fake) if p != "libpython3.13-testsuite") + "\n")
    fake.calls()
    r = fake(SETUP, "--packages-only")
    assert r.returncode == 0, r.stderr
    installs = fake.calls("apt-get install")
    assert len(installs) == 1 and installs[0].split()[-1] == "libpython3.13-testsuite"


def test_groups_can_be_left_out(fake):
    r = fake(SETUP, "--packages-only", PORTAL_SETUP_WITHOUT="slurm lanes")
    assert r.returncode == 0, r.stderr
    pkgs = installed(fake)
    assert "python3-torch" in pkgs
    assert not {"slurmctld", "slurmd", "slurm-client", "munge", "debootstrap"} & set(pkgs)


def test_a_failed_install_says_apts_reason(fake):
    r = fake(SETUP, "--packages-only", FAKE_APT_FAIL="1")
    assert r.returncode == 1
    assert "E: Unable to correct problems, you have held broken packages." in r.stderr
    assert " python3-torch : Depends: libtorch2.14 but it is not installable" in r.stderr
    assert r.stderr.splitlines()[-1].startswith("portal: setup: apt-get install failed (status 100)")
    assert not Path(fake.log.parent / "policy-rc.d").exists()


def test_usage(fake):
    r = fake(SETUP, "--frobnicate")
    assert r.returncode == 2 and r.stderr.startswith("portal: setup: usage: ")
    assert fake.calls() == []
