#!/usr/bin/env bash
# kill-random-stress.sh: the kill-at-random trials of tests/e2e/kill_random.py,
# 50 per phase (run, checkpoint write, resume) unless TRIALS says otherwise, on
# the build in $BUILD_DIR (default build/).  Not part of CI (about 15 minutes);
# prints its seed, one line per trial and the counts: lost, double runs and
# orphaned processes must all be 0 (exit status 1 otherwise).
#   bash scripts/kill-random-stress.sh [--seed N] [--phase run|suspend|resume]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$here/build}
python=${PORTAL_PYTHON:-/usr/bin/python3}
[ -x "$build/bin/portal-run" ] || { echo "kill-random-stress: build first ($build/bin/portal-run is missing)" >&2; exit 2; }
home=$(mktemp -d -t portal-kill-home.XXXXXX)   # never the user's own store
trap 'rm -rf "$home"' EXIT
PORTAL_RUN=$build/bin/portal-run PORTAL=$build/bin/portal PORTAL_PYTHON=$python \
  PORTAL_HOME=$home PYTHONDONTWRITEBYTECODE=1 \
  "$python" "$here/tests/e2e/kill_random.py" --trials "${TRIALS:-50}" "$@"
