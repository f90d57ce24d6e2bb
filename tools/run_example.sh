#!/usr/bin/env bash
# The README's main command: sets up everything (tools/setup.sh) and runs the example job.
# Until training lands (issue 3) the job is `mlip neighbor-stat` on the 32-molecule water box
# the project builds itself (examples/water/box32, made by examples/water/reference/make_box.py).
#
# usage: tools/run_example.sh [--no-setup] [--build-dir DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${MLIP_BUILD_DIR:-$ROOT/build}"
SETUP=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-setup) SETUP=0; shift ;;
    --build-dir) BUILD_DIR="$2"; shift 2 ;;
    *) echo "run_example.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[ "$SETUP" = 0 ] || bash "$ROOT/tools/setup.sh" --build-dir "$BUILD_DIR" --quiet
MLIP="$BUILD_DIR/bin/mlip"
"$MLIP" --version
echo "+ mlip neighbor-stat -s examples/water/box32 -r 6.0 -t O H"
"$MLIP" neighbor-stat -s "$ROOT/examples/water/box32" -r 6.0 -t O H
