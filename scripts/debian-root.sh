#!/usr/bin/env bash
# debian-root.sh SUITE: a Debian root (trixie = Debian 13, forky = Debian testing,
# ...) with what building and testing Portal needs, at
# ${PORTAL_ROOTS:-/var/cache/portal-roots}/SUITE, for scripts/lane.sh.
#
# - Reused when it exists and is complete: a stamp file, written last, holds the
#   hash of the package list; a root whose stamp is missing (built by hand) or
#   names another list is topped up in place with apt (what it has is kept).
# - Built atomically otherwise: debootstrap --variant=minbase into SUITE.tmp, apt
#   inside it, stamp, rename to SUITE.  A leftover SUITE.tmp is discarded.
# - When Debian's archive itself cannot give a working root (debootstrap or apt
#   fails, as in a transition of testing; a stable suite fails instead), it prints one line
#   `skipped: SUITE: <the archive's error>` on stdout and exits 3, so a caller can
#   tell it from a failure of Portal's code.  The full log is SUITE.log beside it.
# Exit status: 0 ready, 1 failure of this script's own, 2 usage, 3 skipped.
# Environment: PORTAL_ROOTS, PORTAL_DEBIAN_MIRROR, PORTAL_ROOT_EXTRA_PACKAGES
# (more packages, space-separated: part of the list and of its hash),
# PORTAL_ROOT_ANY_SUITE=1 (a suite other than bookworm, trixie, forky, sid).
set -euo pipefail
# The whole script is one block: bash parses it all before running any of it, so
# an edit of this file never changes a run already under way.
{

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/root-mounts.sh
source "$here/scripts/lib/root-mounts.sh"

readonly STATUS_FAILED=1
readonly STATUS_USAGE=2
readonly STATUS_SKIPPED=3
readonly STAMP_NAME=.portal-root-stamp
# Bump when the way a root is set up changes (not only its package list).
readonly ROOT_FORMAT=1
readonly LOCK_WAIT_S=3600
readonly DEBOOTSTRAP_SCRIPTS=/usr/share/debootstrap/scripts

# What building and testing Portal needs in the root (scripts/setup.sh's list, under
# the names every suite has; the version-named ones follow below).
packages=(
  # toolchain
  g++ make cmake pkg-config
  # the libFuzzer target of the record reader (tests/fuzz)
  clang libclang-rt-dev
  # the interpreter and its headers, venvs for the interpreter tests
  python3 python3-dev python3-venv
  # what the programs, tests and examples use
  python3-numpy python3-torch python3-pytest python3-tqdm
  # torch.compile's inductor backend compiles its kernels: cpp_extension, ATen's headers
  python3-setuptools libtorch-dev
  # C++ libraries
  pybind11-dev libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev
  # the e2e `users` fixture (useradd, setpriv), locks (flock)
  passwd util-linux
  # the benches name the checkout's commit (bench/checkpoint_io.py needs git to run);
  # bench/overhead_instructions.py counts instructions under cachegrind
  git valgrind
)
# Named after the root's python3 version X.Y (known once python3 is in): CPython's
# own test suite, for test_sys_settrace run instrumented (e2e.compat).
python_packages=(libpython@PYVER@-testsuite)
# Suites whose Release file may be past its Valid-Until date on the mirror.
rolling_suites=" forky testing sid unstable "

say() { echo "portal: root: $*" >&2; }
fail() { say "$*"; exit "$STATUS_FAILED"; }

if [ $# -ne 1 ] || ! [[ $1 =~ ^[a-z][a-z0-9-]*$ ]]; then
  echo "portal: root: usage: bash scripts/debian-root.sh SUITE   (trixie, forky, ...)" >&2
  exit "$STATUS_USAGE"
fi
suite=$1
# The suites a lane is meant for; a typo must not pass for an archive that cannot
# give a root (a skip).  PORTAL_ROOT_ANY_SUITE=1 allows any other name.
known_suites=" bookworm trixie forky sid "
if [[ $known_suites != *" $suite "* ]] && [ "${PORTAL_ROOT_ANY_SUITE:-}" != 1 ]; then
  echo "portal: root: $suite: not a suite Portal's lanes use (one of:$known_suites); PORTAL_ROOT_ANY_SUITE=1 to build it anyway" >&2
  exit "$STATUS_USAGE"
fi
roots=${PORTAL_ROOTS:-/var/cache/portal-roots}
mirror=${PORTAL_DEBIAN_MIRROR:-http://deb.debian.org/debian}
read -r -a extra <<<"${PORTAL_ROOT_EXTRA_PACKAGES:-}"
packages+=("${extra[@]}")
root=$roots/$suite
tmp=$root.tmp
log=$root.log

list_hash=$(printf '%s\n' "format=$ROOT_FORMAT" "suite=$suite" "mirror=$mirror" \
  "${packages[@]}" "${python_packages[@]}" | sha256sum | cut -d' ' -f1)
stamp_line="portal-root suite=$suite packages=$list_hash"

root_private_namespace "${BASH_SOURCE[0]}" "$@"

mkdir -p "$roots" || fail "$roots: cannot create it"
# Whoever can write into a root runs code as root in every lane: refuse one that
# is not ours alone (the roots directory, and the root itself when it exists).
refuse_foreign() {
  local path=$1 owner mode
  read -r owner mode < <(stat -L -c '%u %a' "$path")
  if [ "$owner" != "$(id -u)" ] || (( 8#$mode & 8#022 )); then
    fail "$path: owned by uid $owner with mode $mode: a root must be writable by its owner only ($(id -un)); fix it or choose another PORTAL_ROOTS"
  fi
}
refuse_foreign "$roots"
if [ -e "$root" ]; then refuse_foreign "$root"; fi
# One builder of a root at a time (another lane may be setting up the same suite).
exec {lock_fd}>"$roots/.$suite.lock"
flock -w "$LOCK_WAIT_S" "$lock_fd" || fail "$root: still locked by another builder after ${LOCK_WAIT_S}s"

# discard_tmp: drop a half-built SUITE.tmp (nothing mounted in it any more).
building=
discard_tmp() {
  root_unmount_all
  if [ -n "$building" ]; then rm -rf --one-file-system "$tmp"; fi
}

# skip WHAT: the archive could not give a working root.  For a suite that moves
# (testing) that is the archive's state of the day: one line, status 3.  A stable
# suite does not move, so there it is a failure (of the list, of the network).
skip() {
  local err detail why
  err=$(grep -E '^(E|W): ' "$log" | tail -n 1 || true)
  detail=$(grep -E ' (Depends|PreDepends): ' "$log" | head -n 1 | sed 's/^ *//' || true)
  [ -n "$err" ] || err=$(grep -v '^\s*$' "$log" | tail -n 1 || true)
  why="$1: ${err:-no output}${detail:+ ($detail)}"
  discard_tmp
  if [[ $rolling_suites != *" $suite "* ]]; then
    fail "$suite: $why (a stable suite: not skipped; the full log: $log)"
  fi
  echo "skipped: $suite: $why"
  say "the full log: $log"
  exit "$STATUS_SKIPPED"
}

in_root() { # DIR CMD...: run CMD in the root DIR, output to the log
  local dir=$1; shift
  chroot "$dir" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive "$@" >>"$log" 2>&1
}

# install DIR: configure apt in the root DIR and install the package lists.
install_packages() {
  local dir=$1 pyver p
  cp /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true
  if [[ $rolling_suites == *" $suite "* ]]; then
    echo 'Acquire::Check-Valid-Until "false";' >"$dir/etc/apt/apt.conf.d/99portal-valid-until"
  fi
  # Packages must not start services in the root (a policy already there is kept).
  local own_policy=
  if [ ! -e "$dir/usr/sbin/policy-rc.d" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d"
    chmod 755 "$dir/usr/sbin/policy-rc.d"
    own_policy=1
  fi
  root_mount "$dir" proc
  in_root "$dir" apt-get update -q || skip "apt-get update"
  in_root "$dir" apt-get install -y -q --no-install-recommends "${packages[@]}" || skip "apt-get install"
  pyver=$(chroot "$dir" /usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>>"$log") \
    || skip "python3 does not run"
  local named=()
  for p in "${python_packages[@]}"; do named+=("${p//@PYVER@/$pyver}"); done
  in_root "$dir" apt-get install -y -q --no-install-recommends "${named[@]}" || skip "apt-get install"
  in_root "$dir" apt-get clean || true
  if [ -n "$own_policy" ]; then rm -f "$dir/usr/sbin/policy-rc.d"; fi
  root_unmount_all
}

is_debian_root() { [ -x "$1/usr/bin/apt-get" ] && [ -f "$1/etc/debian_version" ]; }

trap 'discard_tmp' EXIT
: >"$log"

if [ -f "$root/$STAMP_NAME" ] && [ "$(cat "$root/$STAMP_NAME")" = "$stamp_line" ]; then
  say "$suite: ready, reused: $root"
  exit 0
fi

if is_debian_root "$root"; then
  # Complete but for the list (or built by hand): top up in place, so that whoever
  # is using it keeps what is there.  No stamp until it is complete again.
  say "$suite: topping up $root with the package list (log: $log)"
  rm -f "$root/$STAMP_NAME"
  install_packages "$root"
  echo "$stamp_line" >"$root/$STAMP_NAME.tmp"
  mv -f "$root/$STAMP_NAME.tmp" "$root/$STAMP_NAME"
  say "$suite: ready, topped up: $root"
  exit 0
fi

rm -rf --one-file-system "$tmp"
building=1
script=()
if [ ! -e "$DEBOOTSTRAP_SCRIPTS/$suite" ]; then
  # bookworm's debootstrap has no script for the suites after it: sid's fits them.
  script=("$DEBOOTSTRAP_SCRIPTS/sid")
fi
say "$suite: building $root with debootstrap (log: $log)"
debootstrap --variant=minbase "$suite" "$tmp" "$mirror" "${script[@]}" >>"$log" 2>&1 \
  || skip "debootstrap"
install_packages "$tmp"
echo "$stamp_line" >"$tmp/$STAMP_NAME"
if [ -e "$root" ]; then
  # Something that is not a Debian root is in the way: move it aside, then drop it.
  mv "$root" "$root.old.$$" || fail "$root: cannot move it aside"
  mv "$tmp" "$root"
  rm -rf --one-file-system "$root.old.$$"
else
  mv "$tmp" "$root"
fi
building=
say "$suite: ready, built: $root"
exit
}
