#!/usr/bin/env bash
# The README's main command: sets up everything (tools/setup.sh), then trains the water
# example for a short run (examples/water/quick.yaml, a few minutes, with progress), freezes
# it, and tests it on the validation system, printing the RMSEs. Outputs go to
# examples/water/run/ (ignored by git).
#
# usage: tools/run_example.sh [--torch debian|pip] [--no-setup] [--build-dir DIR] [--steps N]
#   --torch pip: the build against pip's PyTorch 2.11.0 LibTorch, in build-cuda/ (README
#   "Building with CUDA: the pip build"; faster for MD and the equivariant model on the CPU)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${MLIP_BUILD_DIR:-}"
TORCH=debian
SETUP=1
STEPS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --torch) TORCH="$2"; shift 2 ;;
    --no-setup) SETUP=0; shift ;;
    --build-dir) BUILD_DIR="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    *) echo "run_example.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
case "$TORCH" in
  debian) BUILD_DIR="${BUILD_DIR:-$ROOT/build}" ;;
  pip) BUILD_DIR="${BUILD_DIR:-$ROOT/build-cuda}" ;;
  *) echo "run_example.sh: --torch: expected debian or pip, got '$TORCH'" >&2; exit 2 ;;
esac
# Only what the main job needs (the mlip executable): the tests are built by tools/run_tests.sh.
[ "$SETUP" = 0 ] || bash "$ROOT/tools/setup.sh" --torch "$TORCH" --build-dir "$BUILD_DIR" --target mlip --quiet
MLIP="$BUILD_DIR/bin/mlip"
EX="$ROOT/examples/water"
RUN="$EX/run"
rm -rf "$RUN"
mkdir -p "$RUN"
INPUT="$EX/quick.yaml"
if [ -n "$STEPS" ]; then  # a shorter run (used by the test suite)
  sed -e "s/^  numb_steps: .*/  numb_steps: $STEPS/" -e "s/^  save_freq: .*/  save_freq: $STEPS/" \
      -e "s/^  disp_freq: .*/  disp_freq: $(( STEPS > 1 ? STEPS / 2 : 1 ))/" "$INPUT" > "$RUN/input.yaml"
  sed -i "s#systems: \[data/#systems: [$EX/data/#" "$RUN/input.yaml"
  INPUT="$RUN/input.yaml"
fi
"$MLIP" --version
echo "+ mlip train $(basename "$INPUT")   (in examples/water; outputs in examples/water/run)"
(cd "$EX" && "$MLIP" train "$INPUT" -o "$RUN")
echo "+ mlip freeze -c run -o run/frozen_model.pt"
"$MLIP" freeze -c "$RUN" -o "$RUN/frozen_model.pt"
echo "+ mlip test -m run/frozen_model.pt -s data/valid -d run/detail"
"$MLIP" test -m "$RUN/frozen_model.pt" -s "$EX/data/valid" -d "$RUN/detail"
