#!/usr/bin/env bash
# The README's test command: sets up everything (tools/setup.sh) and runs the test suite with
# ctest, against each LibTorch build:
#   the default build (build/, Debian's LibTorch 1.13): the whole suite;
#   the pip build (build-cuda/, the LibTorch of pip's PyTorch 2.11.0 for CUDA 13, run on the CPU
#   where no GPU is visible): the whole suite too, plus tests/builds (checkpoints and frozen
#   models moved between the two builds, both directions).
#
# usage: tools/run_tests.sh [--torch debian|pip|both] [ctest arguments, e.g. -R neighbor]
#   --torch: which builds; default both where the CUDA toolkit is installed (nvcc), else debian
#   with a note. Under CI (CI=true) the default is both, and a missing toolkit is an error.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${MLIP_BUILD_DIR:-$ROOT/build}"
PIP_BUILD_DIR="${MLIP_PIP_BUILD_DIR:-$ROOT/build-cuda}"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
TORCH=""
if [ "${1:-}" = "--torch" ]; then TORCH="$2"; shift 2; fi
if [ -z "$TORCH" ]; then
  if [ -x "$CUDA_HOME/bin/nvcc" ] || [ "${CI:-}" = true ]; then TORCH=both; else
    TORCH=debian
    echo "[mlip tests] no CUDA toolkit at $CUDA_HOME: testing the default build only (the pip/CUDA build needs nvcc)"
  fi
fi
case "$TORCH" in debian|pip|both) ;; *) echo "run_tests.sh: --torch: expected debian, pip or both, got '$TORCH'" >&2; exit 2 ;; esac
JOBS="$(nproc 2>/dev/null || echo 2)"

# Both builds first (the pip build's tests/builds run the default build's mlip).
bash "$ROOT/tools/setup.sh" --build-dir "$BUILD_DIR" --quiet
[ "$TORCH" = debian ] || bash "$ROOT/tools/setup.sh" --torch pip --build-dir "$PIP_BUILD_DIR" --quiet

status=0
run_suite() {  # run_suite <name> <build dir> [ctest arguments]
  local name="$1" dir="$2"; shift 2
  echo "[mlip tests] $name: ctest in $dir"
  (cd "$dir" && ctest --output-on-failure -j "$JOBS" "$@") || { status=1; echo "[mlip tests] $name: FAILED"; }
}
[ "$TORCH" = pip ] || run_suite "default build (Debian's LibTorch)" "$BUILD_DIR" "$@"
[ "$TORCH" = debian ] || run_suite "pip build ($("$PIP_BUILD_DIR/bin/mlip" --version))" "$PIP_BUILD_DIR" "$@"
exit $status
