#!/usr/bin/env bash
# ctest: train a tiny model, freeze it, run `mlip test -d`, and check the frozen file from
# the test Python's PyTorch (tests/python/check_frozen.py; Debian's, or pip's in a build against pip's LibTorch).
# usage: test_frozen_python.sh <mlip> [se_e2_a|equivariant]
set -euo pipefail
MLIP="$1"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${MLIP_TEST_PYTHON:-/usr/bin/python3}"
"$PY" -c "import torch, ase, numpy" || { echo "$PY needs torch, ase and numpy (tools/setup.sh installs them)"; exit 1; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
# shellcheck source=tests/python/small_run.sh
source "$HERE/small_run.sh"
small_data "$PY"
small_input "${2:-se_e2_a}" 5 10
"$MLIP" train input.yaml > train.log
"$MLIP" freeze -c . -o frozen.pt
"$MLIP" test -m frozen.pt -s data/valid -d detail > test.log
"$PY" "$HERE/check_frozen.py" frozen.pt data/valid detail "$HERE/../../tools"
