#!/usr/bin/env bash
# Which model for a given wall time (issue 5): se_e2_a (examples/water/quick.yaml) and the
# equivariant model (examples/water/equivariant.yaml) each train on the DFT water set
# (../shared/data/water: data_0..2, batch 1, float64) for the same wall-clock budget; the
# run is stopped with Ctrl-C (which saves a checkpoint) when the budget is spent, and
# `mlip test` reports rmse_e and rmse_f on all 80 frames of data_3. Also the median ms/step.
#
# usage: bench/model_choice_bench.sh [--seconds 42] [--threads 2]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MLIP="$ROOT/build/bin/mlip"
SECONDS_BUDGET=42
THREADS=2
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_BUDGET="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    *) echo "model_choice_bench.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
DATA="$(cd "$ROOT/.." && pwd)/shared/data/water"
[ -d "$DATA/data_0" ] || { echo "needs the DFT water set in ../shared/data/water"; exit 1; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
printf "# water DFT set (192 atoms), train data_0..2, test data_3 (80 frames), float64, %s threads, %s s of training each\n" \
  "$THREADS" "$SECONDS_BUDGET"
printf "# %-12s %8s %10s %16s %14s\n" model steps ms/step rmse_e_eV/atom rmse_f_eV/A
for name in quick equivariant; do
  sed -e "s#systems: \[data/train\]#systems: [$DATA/data_0, $DATA/data_1, $DATA/data_2]#" \
      -e "s#systems: \[data/valid\]#systems: [$DATA/data_3]#" -e "s/batch_size: auto/batch_size: 1/" \
      -e "s/numb_btch: 3/numb_btch: 1/" "$ROOT/examples/water/$name.yaml" > "$WORK/$name.yaml"
  OMP_NUM_THREADS="$THREADS" "$MLIP" train "$WORK/$name.yaml" -o "$WORK/$name" --step-times "$WORK/$name.t" \
    > "$WORK/$name.log" 2>&1 &
  pid=$!
  # The budget counts from the first step (data preparation and statistics excluded).
  until [ -s "$WORK/$name/lcurve.out" ] && grep -qv '^#' "$WORK/$name/lcurve.out"; do
    kill -0 "$pid" 2>/dev/null || { cat "$WORK/$name.log"; exit 1; }
    sleep 0.2
  done
  sleep "$SECONDS_BUDGET"
  kill -INT "$pid" 2>/dev/null || true
  wait "$pid" || true
  steps=$(grep -c . "$WORK/$name.t")
  steps=$((steps - 1))
  ms=$(awk '!/^#/ { print $2 }' "$WORK/$name.t" | sort -g | awk '{ a[NR] = $1 } END { print a[int(NR / 2) + 1] }')
  "$MLIP" test -m "$WORK/$name" -s "$DATA/data_3" > "$WORK/$name.test"
  e=$(grep "Energy RMSE/Natoms" "$WORK/$name.test" | tail -1 | awk '{print $4}')
  f=$(grep "Force  RMSE" "$WORK/$name.test" | tail -1 | awk '{print $4}')
  printf "  %-12s %8s %10.1f %16s %14s\n" "$([ $name = quick ] && echo se_e2_a || echo equivariant)" "$steps" "$ms" "$e" "$f"
done
