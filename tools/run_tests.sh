#!/usr/bin/env bash
# The README's test command: sets up everything (tools/setup.sh) and runs the whole test
# suite with ctest. Extra arguments go to ctest (e.g. -R neighbor).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${MLIP_BUILD_DIR:-$ROOT/build}"
bash "$ROOT/tools/setup.sh" --build-dir "$BUILD_DIR" --quiet
cd "$BUILD_DIR"
ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" "$@"
