#!/usr/bin/env bash
# tests/gpu/run.sh: the GPU check (issue 14 item 5) in one command.
#
#   bash tests/gpu/run.sh --prepare   on a developer's machine (Debian 12): gather the
#                                     header-only C++ libraries the build needs into
#                                     build-gpu-deps/ (ignored by git: carry it)
#   bash tests/gpu/run.sh             on the lent GPU machine: build Portal from the
#                                     working tree into build-gpu/ against its python
#                                     (/opt/torch/.venv/bin/python3: 3.12, torch 2.11,
#                                     CUDA), run the checks, write the report to $OUT
#   bash tests/gpu/run.sh --dry-run   here, on the CPU: the same build and harness with
#                                     this machine's python; each GPU check is skipped
#                                     with a line saying so, the rest runs on the CPU
#
# The device tool's call (tests/gpu/README.md):
#   run(command="bash tests/gpu/run.sh", carry=["build-gpu-deps"], timeout_s=540)
# Environment: PORTAL_GPU_PYTHON (the interpreter), OUT (the report's folder; default
# build-gpu/out), PORTAL_GPU_STATE_MIB (the CUDA state of the throughput check;
# default 8192), JOBS (build jobs; default the machine's cores).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
deps="$here/build-gpu-deps"
build="${PORTAL_GPU_BUILD_DIR:-$here/build-gpu}"

say() { echo "portal: gpu check: $*" >&2; }
die() { say "$*"; exit 2; }

mode=gpu
case "${1:-}" in
  --prepare) mode=prepare ;;
  --dry-run) mode=dry ;;
  "") ;;
  *) die "unknown option ${1} (use --prepare, --dry-run or nothing)" ;;
esac

# ---- --prepare: the header-only libraries, with CMake configs of their own --------
# CLI11, nlohmann/json, spdlog and fmt (spdlog used header-only over fmt header-only:
# Debian's spdlog headers carry their -inl.h parts); pybind11 too, for a machine whose
# python has none (the GPU venv has its own, preferred).  Copied from Debian's
# packages (libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev pybind11-dev).
prepare() {
  local inc="$deps/include" cm="$deps/lib/cmake"
  rm -rf "$deps"
  mkdir -p "$inc" "$cm"/{CLI11,nlohmann_json,spdlog,pybind11}
  for d in CLI nlohmann spdlog fmt pybind11; do
    [ -d "/usr/include/$d" ] || die "/usr/include/$d is missing (install Debian's -dev package for it)"
    cp -r "/usr/include/$d" "$inc/"
  done
  cp -r /usr/lib/cmake/pybind11/. "$cm/pybind11/"
  cat >"$cm/CLI11/CLI11Config.cmake" <<'EOF'
# portal: CLI11, header-only, carried to a machine without it (tests/gpu/run.sh)
if(NOT TARGET CLI11::CLI11)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  set_target_properties(CLI11::CLI11 PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${CMAKE_CURRENT_LIST_DIR}/../../../include")
endif()
set(CLI11_FOUND TRUE)
EOF
  cat >"$cm/nlohmann_json/nlohmann_jsonConfig.cmake" <<'EOF'
# portal: nlohmann/json, header-only, carried to a machine without it (tests/gpu/run.sh)
if(NOT TARGET nlohmann_json::nlohmann_json)
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  set_target_properties(nlohmann_json::nlohmann_json PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${CMAKE_CURRENT_LIST_DIR}/../../../include")
endif()
set(nlohmann_json_FOUND TRUE)
EOF
  cat >"$cm/spdlog/spdlogConfig.cmake" <<'EOF'
# portal: spdlog header-only over fmt header-only, carried to a machine without them
# (tests/gpu/run.sh): no SPDLOG_COMPILED_LIB, so spdlog includes its -inl.h parts.
if(NOT TARGET spdlog::spdlog)
  add_library(spdlog::spdlog INTERFACE IMPORTED)
  set_target_properties(spdlog::spdlog PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${CMAKE_CURRENT_LIST_DIR}/../../../include"
    INTERFACE_COMPILE_DEFINITIONS "SPDLOG_FMT_EXTERNAL;FMT_HEADER_ONLY")
endif()
set(spdlog_FOUND TRUE)
EOF
  # Python 3.12's headers with internal/ (the frame layer needs pycore_frame.h), for a
  # 3.12 whose -dev files lack them: from the developer's CPython 3.12 build, if any.
  local py312=/var/tmp/cpython312/include/python3.12
  if [ -f "$py312/internal/pycore_frame.h" ]; then
    mkdir -p "$deps/python3.12-include"
    cp -r "$py312/internal" "$deps/python3.12-include/"
    "$py312/../../bin/python3.12" -c 'import sys; print(sys.version.split()[0])' \
      >"$deps/python3.12-include/VERSION"
  fi
  say "prepared $(du -sh "$deps" | cut -f1) in $deps: carry build-gpu-deps"
}

if [ "$mode" = prepare ]; then
  prepare
  exit 0
fi

# ---- the interpreter ----------------------------------------------------------------
if [ -n "${PORTAL_GPU_PYTHON:-}" ]; then
  py="$PORTAL_GPU_PYTHON"
elif [ "$mode" = gpu ] && [ -x /opt/torch/.venv/bin/python3 ]; then
  py=/opt/torch/.venv/bin/python3
elif [ "$mode" = dry ]; then
  py=/usr/bin/python3
else
  py=$(command -v python3) || die "no python3 found (set PORTAL_GPU_PYTHON)"
fi
[ -x "$py" ] || die "$py is not an executable interpreter (set PORTAL_GPU_PYTHON)"
export OUT="${OUT:-$build/out}"
mkdir -p "$OUT" "$build"
log="$OUT/gpu-build.log"
: >"$log"
start=$(date +%s)

[ -d "$deps/include" ] || die "build-gpu-deps/ is missing: run 'bash tests/gpu/run.sh --prepare' on a developer's machine and carry build-gpu-deps"
# CMake and ninja may be the venv's own (pip packages) beside its python.
PATH="$PATH:$(dirname "$py")"
for tool in cmake c++ cc; do
  command -v "$tool" >/dev/null || die "$tool is not on PATH"
done

# Python's headers: the frame layer needs internal/pycore_frame.h.  A 3.12 without
# them gets the carried ones of the 3.12 they were taken from (said in the report).
pyinc=$("$py" -c 'import sysconfig; print(sysconfig.get_path("include"))')
pyver=$("$py" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
headers_note="its own"
if [ ! -f "$pyinc/Python.h" ]; then
  die "$py ($pyver) has no headers at $pyinc (Python.h): its -dev files are not installed"
fi
if [ ! -f "$pyinc/internal/pycore_frame.h" ]; then
  carried="$deps/python3.12-include"
  if [ "${pyver%.*}" = 3.12 ] && [ -f "$carried/internal/pycore_frame.h" ] && [ "$mode" = gpu ]; then
    cp -r "$carried/internal" "$pyinc/"
    headers_note="internal/ carried from CPython $(cat "$carried/VERSION") (it had none)"
  else
    die "$py ($pyver) has no internal headers ($pyinc/internal/pycore_frame.h)"
  fi
fi

# ---- the build ------------------------------------------------------------------------
pybind_dir=$("$py" -m pybind11 --cmakedir 2>/dev/null || echo "$deps/lib/cmake/pybind11")
jobs="${JOBS:-$(nproc)}"
say "building Portal for $py ($pyver, headers: $headers_note) into $build (-j$jobs)"
if ! cmake -S "$here" -B "$build" -DPORTAL_PYTHON="$py" -DPORTAL_PYTHONS="$py" \
      -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$deps" \
      -Dpybind11_DIR="$pybind_dir" -DCMAKE_POLICY_VERSION_MINIMUM=3.5 >>"$log" 2>&1 ||
   ! cmake --build "$build" -j"$jobs" >>"$log" 2>&1; then
  tail -30 "$log" >&2
  die "the build failed (the whole log: $log)"
fi
built=$(( $(date +%s) - start ))
say "built in ${built}s"

args=(--build "$build" --python "$py" --out "$OUT" --headers "$headers_note"
      --build-seconds "$built" --state-mib "${PORTAL_GPU_STATE_MIB:-8192}")
[ "$mode" = dry ] && args+=(--dry-run)
PYTHONUNBUFFERED=1 exec "$py" "$here/tests/gpu/check.py" "${args[@]}"
