#!/usr/bin/env bash
# setup.sh: from a fresh Debian 12 machine to an installed Portal, idempotently.
#   1. install the Debian packages the build, the tests and the examples need
#      (only those missing; `apt-get update` only when something is missing);
#   2. configure and build with CMake (against /usr/bin/python3, whatever python3
#      is first on PATH);
#   3. install portal-run and portal into $PREFIX/bin (default /usr/local) and
#      the Python package into $PREFIX/lib/portal/python.
# Options (environment): PREFIX, BUILD_DIR (default ./build), JOBS.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PREFIX=${PREFIX:-/usr/local}
BUILD_DIR=${BUILD_DIR:-$here/build}
JOBS=${JOBS:-$(nproc)}

packages=(
  # toolchain
  g++ make cmake pkg-config
  # the libFuzzer target of the record reader (tests/fuzz)
  clang libclang-rt-14-dev
  # the interpreter Portal runs programs with, and its headers
  python3 python3-dev libpython3.11-dev
  # what the programs, tests and examples use
  python3-numpy python3-torch python3-pytest python3-tqdm
  # CPython's own test suite: test_sys_settrace run instrumented (e2e.compat)
  libpython3.11-testsuite
  # venvs of the interpreter tests (e2e.interpreter: a venv's own packages, its python3)
  python3-venv
  # C++ libraries
  pybind11-dev libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev libgtest-dev
  # a single-node Slurm for `portal resume --on slurm` and `portal-run --requeue`
  # (tests/e2e/test_slurm.py, scripts/slurm-cluster.sh); no service is started
  slurmctld slurmd slurm-client munge
  # the test lanes in Debian roots (scripts/debian-root.sh, scripts/lane.sh)
  debootstrap
)

say() { echo "portal: setup: $*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  as_root apt-get update -qq
  # Packages such as munge and slurmd would start their services: a policy-rc.d
  # that says no (exit 101) while installing, removed after, only if it is ours.
  policy_rc=/usr/sbin/policy-rc.d
  own_policy_rc=
  if [ ! -e "$policy_rc" ]; then
    as_root sh -c "printf '#!/bin/sh\\nexit 101\\n' > $policy_rc && chmod 755 $policy_rc"
    own_policy_rc=1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  [ -z "$own_policy_rc" ] || as_root rm -f "$policy_rc"
else
  say "all Debian packages present"
fi

say "building in $BUILD_DIR"
cmake -S "$here" -B "$BUILD_DIR" -DCMAKE_INSTALL_PREFIX="$PREFIX" -DPORTAL_PYTHON=/usr/bin/python3 >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS" >/dev/null

say "installing into $PREFIX"
as_root cmake --install "$BUILD_DIR" >/dev/null
say "ready: $(command -v portal-run || echo "$PREFIX/bin/portal-run") ($("$PREFIX/bin/portal-run" --version))"
