#!/usr/bin/env bash
# test.sh: the whole suite - unit tests (GoogleTest, pytest) and end-to-end tests
# (pytest, driving portal-run) under CTest - in each lane of PORTAL_CI_LANES
# (space-separated, in order; default "host trixie forky"): `host` is this machine (set up,
# built in $BUILD_DIR, default build/, and installed by scripts/setup.sh), any
# other name a Debian root of that suite (trixie, forky) built or reused by
# scripts/debian-root.sh and run by scripts/lane.sh.  Each lane ends with its
# runner's summary line (`lane NAME: ...`); then one line per lane with its time,
# and the overall line last.  Exits non-zero if any lane failed; a lane whose root
# the Debian archive could not give (`skipped: ...`) does not fail it.
set -euo pipefail
# One block: bash parses it all before running any of it (an edit of this file
# never changes a run under way).
{
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readonly STATUS_SKIPPED=3
# What the whole of .ci/run may take on the 2-core machine (the CI limit is 90 min).
readonly CI_BUDGET_S=3600
read -r -a lanes <<<"${PORTAL_CI_LANES:-host trixie forky}"
[ ${#lanes[@]} -gt 0 ] || lanes=(host)

fmt() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# The Debian roots are built (or found ready) in the background while the first lane
# runs: debootstrap waits on the archive and the disk more than on the CPU, and the
# lanes would otherwise wait for it one after another.  debian-root.sh locks each
# root, and each lane calls it again (a reuse: under a second), so a root that
# failed here fails, or skips, in its own lane with its own message.
roots_log=$(mktemp -t portal-roots.XXXXXX)
trap 'rm -f "$roots_log"' EXIT
suites=()
for lane in "${lanes[@]}"; do [ "$lane" = host ] || suites+=("$lane"); done
roots_pid=
if [ ${#suites[@]} -gt 0 ]; then
  ( for suite in "${suites[@]}"; do bash "$here/scripts/debian-root.sh" "$suite" || true; done ) \
    >"$roots_log" 2>&1 &
  roots_pid=$!
fi

results=()
failed=0; skipped=0; passed=0
ci_started=$(date +%s)
for lane in "${lanes[@]}"; do
  echo "==== lane $lane ====" >&2
  if [ "$lane" != host ] && [ -n "$roots_pid" ]; then
    wait "$roots_pid" || true
    roots_pid=
    cat "$roots_log" >&2
  fi
  lane_started=$(date +%s)
  status=0
  bash "$here/scripts/lane.sh" "$lane" || status=$?
  took=$(fmt $(( $(date +%s) - lane_started )))
  case "$status" in
    0) passed=$((passed + 1)); results+=("lane $lane: passed in $took") ;;
    "$STATUS_SKIPPED") skipped=$((skipped + 1)); results+=("lane $lane: skipped in $took (not a failure)") ;;
    *) failed=$((failed + 1)); results+=("lane $lane: FAILED in $took (status $status)") ;;
  esac
done
echo "==== lanes ====" >&2
printf '%s\n' "${results[@]}"
total=$(( $(date +%s) - ci_started ))
if [ "$total" -gt "$CI_BUDGET_S" ]; then
  echo "portal: lanes: took $(fmt "$total"), over the $(fmt "$CI_BUDGET_S") budget of .ci/run (docs/development.md, \"Lanes\")" >&2
fi
echo "lanes: $passed passed, $failed failed, $skipped skipped, in $(fmt "$total")"
[ "$failed" -eq 0 ]
exit
}
