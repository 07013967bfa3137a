#!/usr/bin/env bash
# demo.sh: the main job from nothing: set up, build, install, and run the example
# under portal-run next to plain python3, showing they behave the same.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$here/scripts/setup.sh"

example="$here/examples/train_loop.py"
echo "== /usr/bin/python3 examples/train_loop.py --steps 5"
/usr/bin/python3 "$example" --steps 5
echo "== portal-run examples/train_loop.py --steps 5"
portal-run "$example" --steps 5
