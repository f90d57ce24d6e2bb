#!/usr/bin/env bash
# Training-step benchmark (issue 3): se_e2_a with the reference settings on the DFT water set
# (../shared/data/water, data_0..2, 192 atoms per frame), batch 1, 600 steps; prints the
# median ms/step over steps 100-600 (with the 10th and 90th percentiles) and the peak memory,
# for float64 and float32.
#
# usage: bench/train_step_bench.sh [--threads N] [--steps N] [--ema-decay D] [--build-dir DIR]
#   --ema-decay D: training.ema_decay (default 0.99, whose update is fused into Adam's pass; 0: off)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$ROOT/build"
THREADS=2
STEPS=600
EMA=""
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) THREADS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --ema-decay) EMA="$2"; shift 2 ;;
    --build-dir) BUILD_DIR="$2"; shift 2 ;;
    *) echo "train_step_bench.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
DATA="$(cd "$ROOT/.." && pwd)/shared/data/water"
[ -d "$DATA/data_0" ] || { echo "needs the DFT water set in ../shared/data/water"; exit 1; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# The machine's speed at this moment (this VM drifts by ~30%): the BLAS GEMM of the fitting
# net's first layer, through Debian's numpy (the same OpenBLAS), when it is installed.
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  OMP_NUM_THREADS="$THREADS" /usr/bin/python3 - <<'PY'
import time, numpy as np
for dt in (np.float64, np.float32):
    a = np.random.rand(192, 1600).astype(dt); b = np.random.rand(1600, 240).astype(dt)
    for _ in range(20): a @ b
    t0 = time.perf_counter(); reps = 200
    for _ in range(reps): a @ b
    gf = 2 * 192 * 1600 * 240 * reps / (time.perf_counter() - t0) / 1e9
    print("# machine check: GEMM [192 x 1600] x [1600 x 240] %s: %.0f GFLOP/s" % (np.dtype(dt).name, gf))
PY
fi
printf "# se_e2_a water (192 atoms), batch 1, %s threads, steps 100-%s, ema_decay %s\n" "$THREADS" "$STEPS" "${EMA:-0.99 (default)}"
printf "# %-8s %10s %10s %10s %12s\n" precision median_ms p10_ms p90_ms peak_MB
for precision in float64 float32; do
  sed -e "s#systems: \[data/train\]#systems: [$DATA/data_0, $DATA/data_1, $DATA/data_2]#" \
      -e "s#systems: \[data/valid\]#systems: [$DATA/data_3]#" \
      -e "s/batch_size: auto/batch_size: 1/" -e "s/precision: float64/precision: $precision/" \
      -e "s/numb_steps: 1000000/numb_steps: $STEPS/" -e "s/disp_freq: 100/disp_freq: $STEPS/" \
      -e "s/save_freq: 1000/save_freq: $STEPS/" "$ROOT/examples/water/input.yaml" > "$WORK/input.yaml"
  if [ -n "$EMA" ]; then echo "  ema_decay: $EMA" >> "$WORK/input.yaml"; fi
  OMP_NUM_THREADS="$THREADS" /usr/bin/time -f "%M" -o "$WORK/rss" \
    "$BUILD_DIR/bin/mlip" train "$WORK/input.yaml" -o "$WORK/run-$precision" --step-times "$WORK/times-$precision" \
    > "$WORK/log-$precision" 2>&1 || { cat "$WORK/log-$precision"; exit 1; }
  # Percentiles over steps 100..STEPS with plain awk and sort (Debian's awk is mawk).
  awk -v steps="$STEPS" '!/^#/ && $1 >= 100 && $1 <= steps { print $2 }' "$WORK/times-$precision" | sort -g > "$WORK/sorted"
  n=$(wc -l < "$WORK/sorted")
  pick() { sed -n "${1}p" "$WORK/sorted"; }
  printf "  %-8s %10.1f %10.1f %10.1f %12.0f\n" "$precision" "$(pick $((n / 2 + 1)))" "$(pick $((n / 10 + 1)))" \
    "$(pick $((n * 9 / 10 + 1)))" "$(( $(cat "$WORK/rss") / 1024 ))"
done
