#!/usr/bin/env bash
# lane.sh LANE [--bench [--quick] | --instructions]: build Portal and run the whole suite (CTest:
# unit and end-to-end tests) in one lane, as root.
#   host     this machine (Debian 12): scripts/setup.sh (packages, build in
#            $BUILD_DIR, default build/, install), then CTest there;
#   SUITE    a Debian root (trixie, forky, ...) that scripts/debian-root.sh builds
#            or reuses: the source tree is bind-mounted read-only at /portal-src
#            inside it, scripts/setup.sh runs there (the root's packages, which
#            debian-root.sh installed with it; the build with the root's own
#            toolchain and its /usr/bin/python3 (PORTAL_PYTHON) into a build
#            directory of the lane's own, outside the tree; the install into
#            that directory's prefix/), and the suite is tested there; proc, /dev, a fresh /dev/shm,
#            /sys (read-only) and a private /tmp are mounted in a mount namespace
#            of this script's own and unmounted on exit.
# --bench runs bench/overhead.py and bench/checkpoint_io.py in the lane instead of
# the suite (--quick: their short settings); their JSON goes to the build directory.
# --instructions runs bench/overhead_instructions.py instead (the steady-state
# overhead counted in instructions under cachegrind: immune to a busy machine).
# The last line is always `lane LANE: ...`: CTest's summary line, or where it
# stopped.  Exit status: 0 passed, 1 failed, 2 usage, 3 skipped (the Debian archive
# could not give a working root: debian-root.sh's `skipped:` line comes before).
# Environment: PORTAL_ROOTS (debian-root.sh), PORTAL_LANES_BUILD (where the
# chroot lanes build, default /var/tmp/portal-lanes), PORTAL_LANE_CTEST_ARGS (more
# CTest arguments, e.g. "-R unit"), PYTEST_ADDOPTS (passed into the root, e.g.
# "-k resume_twice" to run some cases of a suite), JOBS (default: the number of cores).
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
readonly CTEST_TIMEOUT_S=600
readonly SRC_IN_ROOT=/portal-src
readonly BUILD_IN_ROOT=/portal-build
readonly ROOT_PYTHON=/usr/bin/python3

usage() {
  echo "portal: lane: usage: bash scripts/lane.sh host|SUITE [--bench [--quick] | --instructions]   (SUITE: trixie, forky, ...)" >&2
  exit "$STATUS_USAGE"
}

[ $# -ge 1 ] || usage
lane=$1; shift
bench=; quick=; instructions=
while [ $# -gt 0 ]; do
  case "$1" in
    --bench) bench=1 ;;
    --quick) quick=1 ;;
    --instructions) bench=1; instructions=1 ;;
    *) usage ;;
  esac
  shift
done
[[ $lane =~ ^[a-z][a-z0-9-]*$ ]] || usage
[ -z "$quick" ] || [ -n "$bench" ] || usage
[ -z "$quick" ] || [ -z "$instructions" ] || usage
JOBS=${JOBS:-$(nproc)}
read -r -a ctest_extra <<<"${PORTAL_LANE_CTEST_ARGS:-}"

started=$(date +%s)
elapsed() { local s=$(( $(date +%s) - started )); printf '%dm%02ds' $((s / 60)) $((s % 60)); }
# finish STATUS WHAT: the lane's last line, and its exit.
finish() {
  echo "lane $lane: $2 [$(elapsed)]"
  exit "$1"
}

# The runner's summary line from a CTest log ("100% tests passed, 0 tests failed
# out of 52"), with the names of the failed tests after it; or nothing.
ctest_summary() {
  local line failed
  line=$(grep -E '^[0-9]+% tests passed' "$1" | tail -n 1 || true)
  [ -n "$line" ] || return 0
  failed=$(sed -n '/^The following tests FAILED:/,$p' "$1" | sed -n 's/^[[:space:]]*[0-9]* - \([^ ]*\) .*/\1/p' | paste -sd ' ' || true)
  echo "$line${failed:+: $failed}"
}

# A configure failure in one line: CMake's first error message, and where in this
# project's CMake files it came from (the first frame of the call stack in the tree).
configure_error() {
  awk -v src="$SRC_IN_ROOT/" '
    # A file of the project: CMake names it relative to the source tree, or under it.
    function ours(f) { return f !~ /^\// || index(f, src) == 1 }
    function file_of(line) { sub(/^(CMake Error at )?[[:space:]]*/, "", line); sub(/ \(.*$/, "", line); return line }
    !seen && /^CMake Error/ { seen = 1; inmsg = 1
      if (/^CMake Error at / && ours(file_of($0))) where = file_of($0)
      next }
    inmsg && (/^[[:space:]]*$/ || /^Call Stack/) { if (msg != "") inmsg = 0; next }
    inmsg { line = $0; sub(/^[[:space:]]+/, "", line); msg = msg (msg == "" ? "" : " ") line; next }
    seen && where == "" && /^[[:space:]]+[^[:space:]]+:[0-9]+ \(/ && ours(file_of($0)) { where = file_of($0) }
    END { if (seen) { if (index(where, src) == 1) where = substr(where, length(src) + 1)
                      print msg (where == "" ? "" : " (at " where ")") } }
  ' "$1"
}

bench_commands() { # PYTHON PORTAL_RUN OUTDIR SRC: the bench commands, one a line
  # (the build's portal-run, portal and staged package named for the benches: the
  # lane's build is not the checkout's build/)
  local py="env PORTAL_RUN=$2 PORTAL=${2%-run} PORTAL_PYDIR=$3/lib/portal/python $1" run=$2 out=$3 src=$4
  if [ -n "$instructions" ]; then
    echo "$py $src/bench/overhead_instructions.py --portal-run $run --check"
  elif [ -n "$quick" ]; then
    echo "$py $src/bench/overhead.py --quick --portal-run $run --json $out/bench-overhead.json"
    echo "$py $src/bench/checkpoint_io.py --size-mib 256 --repeats 1 --dir $out/bench-io --json $out/bench-checkpoint-io.json"
  else
    echo "$py $src/bench/overhead.py --portal-run $run --json $out/bench-overhead.json"
    echo "$py $src/bench/checkpoint_io.py --dir $out/bench-io --json $out/bench-checkpoint-io.json"
  fi
}

# ---- host ----------------------------------------------------------------------
if [ "$lane" = host ]; then
  build=${BUILD_DIR:-$here/build}
  # The interpreter Portal runs programs with in this lane, whatever python3 is
  # first on PATH (as in the roots).
  export PORTAL_PYTHON=$ROOT_PYTHON
  log=$(mktemp /tmp/portal-lane-host.XXXXXX.log)
  echo "portal: lane: host: setup, build in $build" >&2
  if ! BUILD_DIR=$build JOBS=$JOBS bash "$here/scripts/setup.sh"; then
    finish "$STATUS_FAILED" "failed at setup/build (scripts/setup.sh above)"
  fi
  if [ -n "$bench" ]; then
    status=0
    while read -r cmd; do
      echo "portal: lane: host: $cmd" >&2
      mkdir -p "$build/bench-io"
      $cmd </dev/null || status=$?
    done < <(bench_commands "$ROOT_PYTHON" "$build/bin/portal-run" "$build" "$here")
    rm -rf "$build/bench-io"
    [ "$status" -eq 0 ] || finish "$STATUS_FAILED" "a bench crashed (status $status)"
    finish 0 "benches done: $build/bench-*.json"
  fi
  status=0
  (cd "$build" && ctest --output-on-failure -j "$JOBS" --timeout "$CTEST_TIMEOUT_S" "${ctest_extra[@]}") \
    2>&1 | tee "$log" || status=$?
  summary=$(ctest_summary "$log")
  rm -f "$log"
  [ -n "$summary" ] || summary="CTest gave no summary (status $status)"
  finish "$([ "$status" -eq 0 ] && echo 0 || echo "$STATUS_FAILED")" "$summary"
fi

# ---- a Debian root ---------------------------------------------------------------
[ "$(id -u)" -eq 0 ] || { echo "portal: lane: $lane: needs root (chroot, mounts)" >&2; exit "$STATUS_USAGE"; }
root_private_namespace "${BASH_SOURCE[0]}" "$lane" ${bench:+--bench} ${quick:+--quick} ${instructions:+--instructions}

roots=${PORTAL_ROOTS:-/var/cache/portal-roots}
status=0
bash "$here/scripts/debian-root.sh" "$lane" || status=$?
case "$status" in
  0) ;;
  "$STATUS_SKIPPED") finish "$STATUS_SKIPPED" "skipped (the Debian archive, not Portal: see the skipped: line)" ;;
  *) finish "$STATUS_FAILED" "failed to set up the root (scripts/debian-root.sh: status $status)" ;;
esac
root=$roots/$lane

# A build directory per lane and per source tree (two checkouts never share one).
tree_key=$(printf '%s' "$here" | sha256sum | cut -c1-12)
build=${PORTAL_LANES_BUILD:-/var/tmp/portal-lanes}/$lane-$tree_key
mkdir -p "$build"
private_tmp=$(mktemp -d "/var/tmp/portal-lane-$lane-tmp.XXXXXX")
chmod 1777 "$private_tmp"
log=$build/lane.log
cleanup() {
  root_unmount_all
  rm -rf --one-file-system "$private_tmp"
}
trap cleanup EXIT

root_mount "$root" proc
root_mount "$root" dev
root_mount "$root" shm
root_mount "$root" sys
root_mount "$root" bind "$private_tmp" /tmp
root_mount "$root" robind "$here" "$SRC_IN_ROOT"
root_mount "$root" bind "$build" "$BUILD_IN_ROOT"

# in_lane CMD: a shell command line in the root, with a clean environment.
in_lane() {
  chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" PORTAL_PYTHON="$ROOT_PYTHON" TMPDIR=/tmp \
    PYTEST_ADDOPTS="${PYTEST_ADDOPTS:-}" /bin/bash -c "$1"
}

echo "portal: lane: $lane: $(in_lane "$ROOT_PYTHON --version" 2>&1), scripts/setup.sh: building $SRC_IN_ROOT in $build" >&2
: >"$log"
# The README's set-up, as a user of this release runs it: its packages (present:
# debian-root.sh installed them with the same script), the build, the install
# (into the lane's build directory: the root is shared).
if ! in_lane "BUILD_DIR=$BUILD_IN_ROOT PREFIX=$BUILD_IN_ROOT/prefix JOBS=$JOBS PORTAL_SETUP_WITHOUT='$ROOT_SETUP_WITHOUT' bash $SRC_IN_ROOT/scripts/setup.sh" \
    2>&1 | tee -a "$log"; then
  if grep -q '^CMake Error' "$log"; then
    finish "$STATUS_FAILED" "failed at configure: $(configure_error "$log")"
  elif grep -q '^portal: setup: building in ' "$log" && ! grep -q '^portal: setup: installing into ' "$log"; then
    finish "$STATUS_FAILED" "failed at build: $(grep -m 1 -E 'error:|Error [0-9]+' "$log" || echo 'see above')"
  fi
  why=$(grep -E '^E: ' "$log" | tail -n 1 || true)
  [ -n "$why" ] || why=$(grep -E '^portal: setup: ' "$log" | tail -n 1 || true)
  finish "$STATUS_FAILED" "failed at setup: ${why:-see above}"
fi

if [ -n "$bench" ]; then
  status=0
  while read -r cmd; do
    echo "portal: lane: $lane: $cmd" >&2
    in_lane "mkdir -p $BUILD_IN_ROOT/bench-io && $cmd" </dev/null || status=$?
  done < <(bench_commands "$ROOT_PYTHON" "$BUILD_IN_ROOT/bin/portal-run" "$BUILD_IN_ROOT" "$SRC_IN_ROOT")
  rm -rf "$build/bench-io"
  [ "$status" -eq 0 ] || finish "$STATUS_FAILED" "a bench crashed (status $status)"
  finish 0 "benches done: $build/bench-*.json"
fi

status=0
ctest_args=$(printf ' %q' "${ctest_extra[@]}")  # quoted for the shell in the root
in_lane "cd $BUILD_IN_ROOT && ctest --output-on-failure -j $JOBS --timeout $CTEST_TIMEOUT_S$ctest_args" \
  2>&1 | tee "$log" || status=$?
summary=$(ctest_summary "$log")
[ -n "$summary" ] || summary="CTest gave no summary (status $status)"
finish "$([ "$status" -eq 0 ] && echo 0 || echo "$STATUS_FAILED")" "$summary"
exit
}
