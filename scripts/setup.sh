#!/usr/bin/env bash
# setup.sh: from a fresh Debian machine (12 bookworm, 13 trixie or testing) to an
# installed Portal, idempotently.
#   1. install the Debian packages the build, the tests and the examples need
#      (only those missing; `apt-get update` only when something is missing); the
#      names that carry a version are chosen for the release: those of its python3
#      (CPython's test suite, libpython3.X-testsuite) and of its torch
#      (torch.compile's headers, from torch 2 on), read from dpkg once the
#      version-free packages are in;
#   2. configure and build with CMake (against /usr/bin/python3, whatever python3
#      is first on PATH);
#   3. install portal-run and portal into $PREFIX/bin (default /usr/local) and
#      the Python package into $PREFIX/lib/portal/python.
# `setup.sh --packages-only` does step 1 alone (scripts/debian-root.sh runs it in a
# lane's Debian root; scripts/lane.sh then runs the whole of it there).
# Options (environment): PREFIX, BUILD_DIR (default ./build), JOBS,
# PORTAL_SETUP_WITHOUT (groups of packages to leave out, space-separated: `slurm`,
# `lanes`; the lanes' roots leave out both).
set -euo pipefail
{

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PREFIX=${PREFIX:-/usr/local}
BUILD_DIR=${BUILD_DIR:-$here/build}
JOBS=${JOBS:-$(nproc)}
# The file that keeps services from starting while packages are installed (the
# tests of this script point it elsewhere).
policy_rc=${PORTAL_SETUP_POLICY_RC:-/usr/sbin/policy-rc.d}

packages_only=
case "${1:-}" in
  "") ;;
  --packages-only) packages_only=1 ;;
  *) echo "portal: setup: usage: bash scripts/setup.sh [--packages-only]" >&2; exit 2 ;;
esac

# Packages whose names are the same in every release.
packages=(
  # toolchain
  g++ make cmake pkg-config
  # the libFuzzer target of the record reader (tests/fuzz): the release's default clang
  clang libclang-rt-dev
  # the interpreter Portal runs programs with, and its headers
  python3 python3-dev
  # what the programs, tests and examples use
  python3-numpy python3-torch python3-pytest python3-tqdm python3-setuptools
  # venvs of the interpreter tests (e2e.interpreter: a venv's own packages, its python3)
  python3-venv
  # C++ libraries
  pybind11-dev libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev
  # the e2e `users` fixture (useradd, setpriv), locks (flock)
  passwd util-linux
  # the benches name the checkout's commit (git); bench/overhead_instructions.py
  # counts instructions under cachegrind (valgrind)
  git valgrind
)
# Groups that PORTAL_SETUP_WITHOUT can leave out.
read -r -a without <<<"${PORTAL_SETUP_WITHOUT:-}"
wanted() { [[ " ${without[*]} " != *" $1 "* ]]; }
# slurm: a single-node Slurm for `portal resume --on slurm` and `portal-run --requeue`
# (tests/e2e/test_slurm.py, scripts/slurm-cluster.sh); no service is started.
if wanted slurm; then packages+=(slurmctld slurmd slurm-client munge); fi
# lanes: the test lanes in Debian roots (scripts/debian-root.sh, scripts/lane.sh).
if wanted lanes; then packages+=(debootstrap); fi

say() { echo "portal: setup: $*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

is_installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

updated=
# ensure PACKAGE...: install those of them that are missing.
ensure() {
  local missing=() p
  for p in "$@"; do is_installed "$p" || missing+=("$p"); done
  [ ${#missing[@]} -gt 0 ] || return 0
  say "installing ${missing[*]}"
  if [ -z "$updated" ]; then
    as_root apt-get update -qq
    updated=1
  fi
  # Packages such as munge and slurmd would start their services: a policy-rc.d
  # that says no (exit 101) while installing, removed after, only if it is ours.
  local own_policy_rc='' out status=0
  if [ ! -e "$policy_rc" ]; then
    as_root sh -c "printf '#!/bin/sh\\nexit 101\\n' > '$policy_rc' && chmod 755 '$policy_rc'"
    own_policy_rc=1
  fi
  out=$(mktemp)
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    >"$out" 2>&1 || status=$?
  [ -z "$own_policy_rc" ] || as_root rm -f "$policy_rc"
  if [ "$status" -ne 0 ]; then
    cat "$out" >&2
    rm -f "$out"
    say "apt-get install failed (status $status): see its messages above"
    exit 1
  fi
  rm -f "$out"
}

# The packages named after the release's versions, asked of dpkg once python3 and
# python3-torch are in: python3 depends on its python3.X.
versioned_packages() {
  local pyver torch
  pyver=$(dpkg-query -W -f='${Depends}' python3 | grep -o -m 1 -E '\bpython3\.[0-9]+\b' | head -n 1 || true)
  [ -n "$pyver" ] || { say "cannot tell the version of python3 from its package (dpkg-query -W python3)"; exit 1; }
  # CPython's own test suite: test_sys_settrace run instrumented (e2e.compat).
  echo "lib$pyver-testsuite"
  torch=$(dpkg-query -W -f='${Version}' python3-torch)
  if dpkg --compare-versions "$torch" ge 2; then
    # torch.compile's inductor backend compiles its kernels: ATen's headers.
    echo libtorch-dev
  fi
}

ensure "${packages[@]}"
names=$(versioned_packages)
mapfile -t versioned <<<"$names"
ensure "${versioned[@]}"
[ -n "$updated" ] || say "all Debian packages present (and ${versioned[*]})"
[ -z "$packages_only" ] || exit 0

say "building in $BUILD_DIR"
cmake -S "$here" -B "$BUILD_DIR" -DCMAKE_INSTALL_PREFIX="$PREFIX" -DPORTAL_PYTHON=/usr/bin/python3 >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS" >/dev/null

say "installing into $PREFIX"
as_root cmake --install "$BUILD_DIR" >/dev/null
say "ready: $PREFIX/bin/portal-run ($("$PREFIX/bin/portal-run" --version))"
exit
}
