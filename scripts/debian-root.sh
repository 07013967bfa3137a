#!/usr/bin/env bash
# debian-root.sh SUITE: a Debian root (trixie = Debian 13, forky = Debian testing,
# ...) with what building and testing Portal needs, at
# ${PORTAL_ROOTS:-/var/cache/portal-roots}/SUITE, for scripts/lane.sh.
#
# - Its packages are those scripts/setup.sh chooses for the suite's release: a copy
#   of it runs in the root with --packages-only (less the groups of
#   ROOT_SETUP_WITHOUT, scripts/lib/root-mounts.sh).
# - Reused when it exists and is complete: a stamp file, written last, holds the
#   hash of what made it (setup.sh, the archive, the extra packages); a root whose
#   stamp is missing (built by hand) or names another hash is topped up in place
#   with apt (what it has is kept).
# - Built atomically otherwise: debootstrap --variant=minbase into SUITE.tmp, apt
#   inside it, stamp, rename to SUITE.  A leftover SUITE.tmp is discarded.
# - When Debian's archive itself cannot give a working root (debootstrap or apt
#   fails, as in a transition of testing; a stable suite fails instead), it prints one line
#   `skipped: SUITE: <the archive's error>` on stdout and exits 3, so a caller can
#   tell it from a failure of Portal's code.  The full log is SUITE.log beside it.
# - The archive is the one this machine's apt uses: the first `URIs:` of a stanza
#   of /etc/apt/sources.list.d/*.sources for a Debian suite (bookworm, stable, ...:
#   not -security, -updates), else the first such `deb` line of
#   /etc/apt/sources.list and sources.list.d/*.list; PORTAL_DEBIAN_MIRROR overrides.
# Exit status: 0 ready, 1 failure of this script's own, 2 usage, 3 skipped.
# Environment: PORTAL_ROOTS, PORTAL_DEBIAN_MIRROR, PORTAL_APT_ETC (where the apt
# sources are read, default /etc/apt), PORTAL_ROOT_EXTRA_PACKAGES
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

# What building and testing Portal needs in the root is what scripts/setup.sh
# installs on the root's release (run there with --packages-only; lane.sh then runs
# the whole of it in the root: a user's path), less ROOT_SETUP_WITHOUT.
setup_script=$here/scripts/setup.sh
readonly SETUP_IN_ROOT=/root/.portal-setup.sh
# Debian's suite names and aliases: a stanza of the machine's apt sources for one
# of them is Debian's archive (not its security archive, updates or backports,
# nor another vendor's repository).
readonly DEBIAN_SUITES="buster bullseye bookworm trixie forky duke sid oldoldstable oldstable stable testing unstable"
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

# machine_archive: the Debian archive of this machine's apt sources (see above), or
# nothing.  deb822 stanzas first (blank-line separated; `#` lines are comments,
# lines that start with a blank continue a field), then one-line `deb` entries.
machine_archive() {
  local etc=${PORTAL_APT_ETC:-/etc/apt} found
  local sources=() lists=() f
  for f in "$etc"/sources.list.d/*.sources; do [ -f "$f" ] && sources+=("$f"); done
  for f in "$etc/sources.list" "$etc"/sources.list.d/*.list; do [ -f "$f" ] && lists+=("$f"); done
  if [ ${#sources[@]} -gt 0 ]; then
    found=$(awk -v suites=" $DEBIAN_SUITES " '
      function usable(uri) { return uri ~ /^(https?|ftp|file):/ }
      function flush(   n, i, list, uri) {
        if (!found && types ~ /(^|[ \t])deb([ \t]|$)/ && tolower(enabled) != "no") {
          n = split(suite_list, list, /[ \t]+/)
          for (i = 1; i <= n; i++) if (list[i] != "" && index(suites, " " list[i] " ")) break
          if (i <= n) {
            n = split(uris, list, /[ \t]+/)
            for (i = 1; i <= n; i++) if (usable(list[i])) { uri = list[i]; break }
            if (uri != "") { found = 1; sub(/\/+$/, "", uri); print uri }
          }
        }
        types = uris = suite_list = enabled = field = ""
      }
      function set(name, value) {
        if (name == "types") types = types " " value
        else if (name == "uris") uris = uris " " value
        else if (name == "suites") suite_list = suite_list " " value
        else if (name == "enabled") enabled = value
      }
      FNR == 1 { flush() }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      /^[ \t]/ { v = $0; gsub(/^[ \t]+|[ \t]+$/, "", v); set(field, v); next }
      { i = index($0, ":"); if (!i) next
        field = tolower(substr($0, 1, i - 1)); v = substr($0, i + 1)
        gsub(/^[ \t]+|[ \t]+$/, "", v); set(field, v) }
      END { flush() }
    ' "${sources[@]}")
    if [ -n "$found" ]; then echo "$found"; return; fi
  fi
  [ ${#lists[@]} -gt 0 ] || return 0
  awk -v suites=" $DEBIAN_SUITES " '
    /^[ \t]*deb[ \t]/ {
      line = $0; sub(/#.*/, "", line); gsub(/\[[^]]*\]/, " ", line)
      n = split(line, f, /[ \t]+/)
      for (i = 1; i <= n && f[i] != "deb"; i++) ;
      uri = f[i + 1]; suite = f[i + 2]
      if (uri ~ /^(https?|ftp|file):/ && index(suites, " " suite " ")) { sub(/\/+$/, "", uri); print uri; exit }
    }
  ' "${lists[@]}"
}

mirror=${PORTAL_DEBIAN_MIRROR:-$(machine_archive)}
if [ -z "$mirror" ]; then
  echo "portal: root: $suite: no Debian archive in this machine's apt sources (${PORTAL_APT_ETC:-/etc/apt}/sources.list.d/*.sources, sources.list): set PORTAL_DEBIAN_MIRROR to the archive to build roots from" >&2
  exit "$STATUS_FAILED"
fi
read -r -a extra <<<"${PORTAL_ROOT_EXTRA_PACKAGES:-}"
root=$roots/$suite
tmp=$root.tmp
log=$root.log

list_hash=$( { printf '%s\n' "format=$ROOT_FORMAT" "suite=$suite" "mirror=$mirror" \
  "without=$ROOT_SETUP_WITHOUT" "${extra[@]}"; cat "$setup_script"; } | sha256sum | cut -d' ' -f1)
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
  local dir=$1
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
  mkdir -p "$dir${SETUP_IN_ROOT%/*}"
  cp "$setup_script" "$dir$SETUP_IN_ROOT"
  in_root "$dir" PORTAL_SETUP_WITHOUT="$ROOT_SETUP_WITHOUT" bash "$SETUP_IN_ROOT" --packages-only \
    || skip "scripts/setup.sh --packages-only"
  rm -f "$dir$SETUP_IN_ROOT"
  if [ ${#extra[@]} -gt 0 ]; then
    in_root "$dir" apt-get install -y -q --no-install-recommends "${extra[@]}" || skip "apt-get install"
  fi
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
