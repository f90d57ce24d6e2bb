#!/usr/bin/env bash
# ctest (docs/device.md "Two LibTorch builds"): checkpoints and frozen models move between two
# builds of mlip against different LibTorch versions (Debian's 1.13, pip's 2.x), both directions.
#
# Each build trains a small model (10 steps, checkpoints at 5 and 10). Then, for each of the two
# checkpoints' writers:
#   1. both builds run `mlip test` on the checkpoint and on frozen models made from it by
#      either build: every prediction equals the writer's own to 1e-10 relative (the same
#      weights on two LibTorch builds: only the BLAS's summation order differs);
#   2. the other build restarts from step 5 and its lcurve.out from step 5 to 10 equals the
#      writer's uninterrupted run to 1e-6 relative (five Adam steps of round-off apart);
#   3. each build's Python PyTorch loads the frozen model the other build wrote
#      (tests/python/check_frozen.py: brute-force neighbours, energies and forces against
#      `mlip test`, the ASE calculator, finite differences).
#
# usage: models_between_builds.sh <mlip A> <python A> <mlip B> <python B> [se_e2_a|equivariant]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TOOLS="$HERE/../../tools"
declare -A MLIP=([a]="$(readlink -f "$1")" [b]="$(readlink -f "$3")")
declare -A PY=([a]="$2" [b]="$4")
MODEL_TYPE="${5:-se_e2_a}"
for k in a b; do
  [ -x "${MLIP[$k]}" ] || { echo "FAIL: ${MLIP[$k]} is not an executable (build it first)"; exit 1; }
  "${PY[$k]}" -c "import torch, ase, numpy" || { echo "FAIL: ${PY[$k]} needs torch, ase and numpy"; exit 1; }
done
fail() { echo "FAIL: $*" >&2; exit 1; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
export OMP_NUM_THREADS=1
echo "build a: $("${MLIP[a]}" --version | head -1) ($(${PY[a]} -c 'import torch; print("Python torch", torch.__version__)'))"
echo "build b: $("${MLIP[b]}" --version | head -1) ($(${PY[b]} -c 'import torch; print("Python torch", torch.__version__)'))"

# shellcheck source=tests/python/small_run.sh
source "$HERE/../python/small_run.sh"
small_data "${PY[a]}"
small_input "$MODEL_TYPE" 1 5

# compare_details <prefix> <prefix>: energies and forces of two `mlip test -d` outputs.
compare_details() {
  "${PY[a]}" - "$1" "$2" <<'PY'
import sys
import numpy as np
a, b = sys.argv[1:3]
for ext, what in ((".e.out", "energies"), (".f.out", "forces")):
    x, y = np.loadtxt(a + ext)[:, 1 if ext == ".e.out" else 3:], np.loadtxt(b + ext)[:, 1 if ext == ".e.out" else 3:]
    scale = max(1.0, np.abs(x).max())
    err = np.abs(x - y).max() / scale
    assert x.shape == y.shape and err <= 1e-10, f"{what}: {a} and {b} differ by {err:.3g} (relative)"
PY
}

for w in a b; do
  (mkdir -p "run_$w" && cd "run_$w" && "${MLIP[$w]}" train ../input.yaml > train.log 2>&1) ||
    { cat "run_$w/train.log"; fail "training with build $w"; }
done

for w in a b; do
  other=$([ "$w" = a ] && echo b || echo a)
  ckpt="run_$w/model.ckpt-10.pt"
  [ -f "$ckpt" ] || fail "build $w wrote no $ckpt"
  # 1. the checkpoint, and frozen models made by either build, tested by either build
  "${MLIP[$w]}" test -m "$ckpt" -s data/valid -d "ref_$w" > /dev/null
  for reader in a b; do
    "${MLIP[$reader]}" test -m "$ckpt" -s data/valid -d "ckpt_${w}_by_$reader" > "test_ckpt_${w}_$reader.log" 2>&1 ||
      { cat "test_ckpt_${w}_$reader.log"; fail "build $reader cannot test build $w's checkpoint"; }
    compare_details "ref_$w" "ckpt_${w}_by_$reader" || fail "build $reader on build $w's checkpoint"
    "${MLIP[$reader]}" freeze -c "$ckpt" -o "frozen_${w}_by_$reader.pt" > /dev/null 2>&1 ||
      fail "build $reader cannot freeze build $w's checkpoint"
    for tester in a b; do
      "${MLIP[$tester]}" test -m "frozen_${w}_by_$reader.pt" -s data/valid -d "frozen_${w}_${reader}_$tester" \
        > "test_frozen.log" 2>&1 || { cat test_frozen.log; fail "build $tester cannot test frozen_${w}_by_$reader.pt"; }
      compare_details "ref_$w" "frozen_${w}_${reader}_$tester" ||
        fail "build $tester on the model build $reader froze from build $w's checkpoint"
    done
  done
  echo "ok: build $w's checkpoint and the models frozen from it give equal predictions in both builds"

  # 2. the other build restarts from build w's step-5 checkpoint
  (mkdir -p "restart_$w" && cd "restart_$w" && "${MLIP[$other]}" train ../input.yaml --restart "../run_$w/model.ckpt-5.pt" \
    > train.log 2>&1) || { cat "restart_$w/train.log"; fail "build $other cannot restart from build $w's checkpoint"; }
  "${PY[a]}" - "run_$w/lcurve.out" "restart_$w/lcurve.out" <<'PY' || fail "build $other's restart from build $w's checkpoint"
import sys
import numpy as np
full, restarted = (np.loadtxt(f, ndmin=2) for f in sys.argv[1:3])
full = full[full[:, 0] > 5]
restarted = restarted[restarted[:, 0] > 5]
assert full.shape == restarted.shape and (full[:, 0] == restarted[:, 0]).all(), (full[:, 0], restarted[:, 0])
err = np.abs(full[:, 1:] - restarted[:, 1:]) / np.maximum(np.abs(full[:, 1:]), 1e-12)
assert err.max() <= 1e-6, f"lcurve.out differs by {err.max():.3g} (relative)"
print(f"ok: steps 6-10 restarted in the other build equal the uninterrupted run to {err.max():.1e}")
PY

  # 3. the other build's Python PyTorch loads this build's frozen model
  "${PY[$other]}" "$HERE/../python/check_frozen.py" "frozen_${w}_by_$w.pt" data/valid "ref_$w" "$TOOLS" ||
    fail "${PY[$other]} on build $w's frozen model"
done
echo "ok: $MODEL_TYPE checkpoints and frozen models move between the two builds, both directions"
