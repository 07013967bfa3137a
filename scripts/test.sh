#!/usr/bin/env bash
# test.sh: set up (idempotent), build, and run the whole suite - unit tests
# (GoogleTest) and end-to-end tests (pytest, driving portal-run) - under CTest.
# Exits non-zero on any failure; CTest's summary line closes the output.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$here/build}

bash "$here/scripts/setup.sh"
cd "$BUILD_DIR"
ctest --output-on-failure -j "$(nproc)" --timeout 600
