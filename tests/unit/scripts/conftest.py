"""Fakes of debootstrap, chroot, mount and umount first on PATH, for the tests of
scripts/debian-root.sh, scripts/lane.sh and scripts/test.sh: no network, nothing
ever mounted (PORTAL_ROOT_NAMESPACE=1: no private namespace either), the roots
and the lanes' build directories under the test's own temporary directory."""
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

