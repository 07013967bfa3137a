#!/usr/bin/env bash
# demo.sh: the main job from nothing: set up, build, install (scripts/setup.sh, into
# $PREFIX, default /usr/local), then run the example training loop under
# `portal-run --mem 2G`, where it really runs out of memory (its workspace, written
# through, doubles each step), resume it in a new process with `portal resume JOB
# --mem 4`, and check the result is that of a run that never failed.  The
# portal-run and portal it runs are those just installed in $PREFIX/bin.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PREFIX=${PREFIX:-/usr/local}
bash "$here/scripts/setup.sh"
portal_run=$PREFIX/bin/portal-run
portal=$PREFIX/bin/portal

example="$here/examples/train_loop.py"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PORTAL_HOME="$work/portal-home"
# The interpreter of the reference run below, not whatever python3 is first on PATH.
export PORTAL_PYTHON=/usr/bin/python3

echo "== python3 examples/train_loop.py (reference)"
/usr/bin/python3 "$example" | tee "$work/reference.txt" | tail -3

echo "== portal-run --mem 2G examples/train_loop.py (runs out of memory on the way)"
set +e
"$portal_run" --mem 2G "$example" >"$work/run.txt" 2>"$work/suspend.txt"
status=$?
set -e
cat "$work/suspend.txt"
[ "$status" -eq 75 ] || { cat "$work/run.txt"; echo "demo: expected exit status 75 (suspended), got $status" >&2; exit 1; }
job=$(sed -n 's/.*portal resume \([^ ]*\).*/\1/p' "$work/suspend.txt" | head -n1)

echo "== portal resume $job --mem 4"
"$portal" resume "$job" --mem 4 >>"$work/run.txt"
tail -3 "$work/run.txt"

if cmp -s "$work/reference.txt" "$work/run.txt"; then
  echo "== the suspended and resumed run printed exactly what the uninterrupted run printed"
else
  diff "$work/reference.txt" "$work/run.txt" || true
  echo "demo: the resumed run differs from the reference" >&2
  exit 1
fi
