"""Fakes of debootstrap, chroot, mount, umount, apt-get, dpkg-query and sudo first
on PATH, for the tests of scripts/setup.sh, scripts/debian-root.sh, scripts/lane.sh
and scripts/test.sh: no network, no package installed, nothing ever mounted
(PORTAL_ROOT_NAMESPACE=1: no private namespace either), the roots and the lanes'
build directories under the test's own temporary directory.  The fake dpkg-query
and apt-get keep the installed packages in $FAKE_DPKG (one a line); python3's
package depends on python$FAKE_PYVER (default 3.13), python3-torch is version
$FAKE_TORCH (default 2.6.0+dfsg-7)."""
import os
import stat
import subprocess
import textwrap

import pytest

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
        mkdir -p "$dir/usr/bin" "$dir/usr/sbin" "$dir/etc/apt/apt.conf.d" "$dir/proc" "$dir/root"
        printf '#!/bin/sh\n' >"$dir/usr/bin/apt-get"; chmod 755 "$dir/usr/bin/apt-get"
        echo 13.0 >"$dir/etc/debian_version"
    """,
    # chroot DIR CMD...: apt-get install records its packages in DIR/installed, and
    # so does scripts/setup.sh --packages-only (run with the fake apt-get and
    # dpkg-query); the lane's setup.sh configures and builds; python3 says 3.13.
    "chroot": r"""
        dir=$1; shift
        echo "chroot $dir $*" >>"$FAKE_LOG"
        case " $* " in
          *" --packages-only "*)
            for a in "$@"; do case "$a" in PORTAL_SETUP_WITHOUT=*) export "$a" ;; esac; done
            for last; do :; done
            FAKE_DPKG="$dir/installed" PORTAL_SETUP_POLICY_RC="$dir/usr/sbin/policy-rc.d" \
              exec bash "$dir/root/.portal-setup.sh" --packages-only ;;
          *"scripts/setup.sh"*)
            if [ "${FAKE_LANE:-}" = setup-fails ]; then
              echo "portal: setup: installing libpython3.13-testsuite"
              echo "E: Unable to locate package libpython3.13-testsuite" >&2
              echo "portal: setup: apt-get install failed (status 100): see its messages above" >&2; exit 1
            fi
            if [ "${FAKE_LANE:-}" = configure-fails ]; then
              echo "portal: setup: building in /portal-build"; cat "$FAKE_CMAKE_ERROR"; exit 1
            fi
            echo "portal: setup: building in /portal-build"; echo "portal: setup: installing into /portal-build/prefix" ;;
          *"cmake --build "*) echo "[100%] Built target portal-run" ;;
          *" ctest "*)
            # The command line as the root's shell would run it, with the fake ctest.
            echo "$*" >>"$FAKE_LOG.ctest"
            for last; do :; done
            exec bash -c "cd() { :; }; $last" ;;
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
    # ctest ARGS...: one argument a line in $FAKE_LOG.ctest-args; passes or fails.
    "ctest": r"""
        printf '%s\n' "$@" >"$FAKE_LOG.ctest-args"
        if [ "${FAKE_LANE:-}" = tests-fail ]; then
          echo "95% tests passed, 1 tests failed out of 20"; echo; echo "The following tests FAILED:"
          echo "	 12 - e2e.training (Failed)"; exit 8
        fi
        echo "100% tests passed, 0 tests failed out of 20"
    """,
    "mount": r"""echo "mount $*" >>"$FAKE_LOG" """,
    # dpkg-query -W -f=FORMAT PACKAGE: ${Status}, ${Depends} (python3), ${Version} (python3-torch).
    "dpkg-query": r"""
        fmt=$2; pkg=$3
        touch "$FAKE_DPKG"
        grep -qx "$pkg" "$FAKE_DPKG" || exit 1
        case "$fmt" in
          *Status*) printf 'install ok installed' ;;
          *Depends*) printf 'python%s (>= 1), libpython3-stdlib (= 1)' "${FAKE_PYVER:-3.13}" ;;
          *Version*) printf '%s' "${FAKE_TORCH:-2.6.0+dfsg-7}" ;;
        esac
    """,
    "apt-get": r"""
        echo "apt-get $*" >>"$FAKE_LOG"
        [ "$1" = install ] || exit 0
        if [ -n "${FAKE_APT_FAIL:-}" ]; then
          echo "Some packages could not be installed."
          echo " python3-torch : Depends: libtorch2.14 but it is not installable"
          echo "E: Unable to correct problems, you have held broken packages." >&2
          exit 100
        fi
        [ ! -e "${PORTAL_SETUP_POLICY_RC:-/nonexistent}" ] || echo "policy-rc.d present" >>"$FAKE_LOG"
        for a in "$@"; do case "$a" in -*|install) ;; *) echo "$a" >>"$FAKE_DPKG";; esac; done
    """,
    "sudo": r"""exec "$@" """,
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
    # The machine's apt sources, as the roots' archive is read from them.
    apt_etc = tmp_path / "apt"
    (apt_etc / "sources.list.d").mkdir(parents=True)
    (apt_etc / "sources.list.d" / "vendor.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: trixie trixie-updates\n"
        "Components: main\n")

    def run(script, *args, **env):
        environ = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", FAKE_LOG=str(log),
                       FAKE_DPKG=str(tmp_path / "dpkg-installed"),
                       PORTAL_SETUP_POLICY_RC=str(tmp_path / "policy-rc.d"),
                       PORTAL_APT_ETC=str(apt_etc),
                       PORTAL_ROOTS=str(roots), PORTAL_LANES_BUILD=str(tmp_path / "builds"),
                       # the fakes mount nothing: no private namespace needed
                       PORTAL_ROOT_NAMESPACE="1")
        for name in ("PORTAL_ROOT_EXTRA_PACKAGES", "PORTAL_SETUP_WITHOUT", "PORTAL_DEBIAN_MIRROR"):
            environ.pop(name, None)
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
    run.apt_etc = apt_etc
    run.dpkg = tmp_path / "dpkg-installed"
    return run

