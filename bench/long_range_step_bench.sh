#!/usr/bin/env bash
# The long-range term's cost in a training step (issue 79; bench/README.md "The long-range term
# in a training step"): examples/ions' two inputs (64 ions) and the water example's equivariant
# model (examples/water/equivariant.yaml, 96 atoms) with and without model.long_range, and the
# ions' se_e2_a twins (se_e2_a_short_range.yaml, se_e2_a_long_range.yaml), each trained for
# --steps steps (no validation, one process), interleaved over --rounds rounds (this VM's speed
# drifts); --cases picks some. Prints ms per step from each run's "finished N steps in T s" line.
# usage: bench/long_range_step_bench.sh [--steps N] [--rounds R] [--cases "ions_se_short ..."] [--mlip PATH]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MLIP="$ROOT/build/bin/mlip"
STEPS=400
ROUNDS=3
CASES="ions_short ions_long water_short water_long ions_se_short ions_se_long"
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --cases) CASES="$2"; shift 2 ;;
    --mlip) MLIP="$(readlink -f "$2")"; shift 2 ;;
    *) echo "usage: $0 [--steps N] [--rounds R] [--cases \"...\"] [--mlip PATH]" >&2; exit 2 ;;
  esac
done
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cut_input() {  # cut_input <input> <data dir> <out> [long]: STEPS steps, no validation
  local extra=""
  [ "${4:-}" = long ] && extra="\n  long_range: {sigma: 1.0, kspace_spacing: 2.0}"
  awk '/^  validation_data:/ {skip = 1; next} skip && /^    / {next} {skip = 0; print}' "$1" |
    sed -e "s#data/#$2/#g" -e "s/^  numb_steps: .*/  numb_steps: $STEPS/" -e "s/^  disp_freq: .*/  disp_freq: $STEPS/" \
        -e "s/^  save_freq: .*/  save_freq: $STEPS/" -e "s/^  seed: 1\$/  seed: 1$extra/" > "$3"
}
cut_input "$ROOT/examples/ions/short_range.yaml" "$ROOT/examples/ions/data" "$WORK/ions_short.yaml"
cut_input "$ROOT/examples/ions/long_range.yaml" "$ROOT/examples/ions/data" "$WORK/ions_long.yaml"
cut_input "$ROOT/examples/water/equivariant.yaml" "$ROOT/examples/water/data" "$WORK/water_short.yaml"
cut_input "$ROOT/examples/water/equivariant.yaml" "$ROOT/examples/water/data" "$WORK/water_long.yaml" long
cut_input "$ROOT/examples/ions/se_e2_a_short_range.yaml" "$ROOT/examples/ions/data" "$WORK/ions_se_short.yaml"
cut_input "$ROOT/examples/ions/se_e2_a_long_range.yaml" "$ROOT/examples/ions/data" "$WORK/ions_se_long.yaml"
grep -q long_range "$WORK/ions_long.yaml" && grep -q long_range "$WORK/water_long.yaml" || { echo "no long_range in the inputs" >&2; exit 1; }
printf "%-12s %6s %10s\n" case round "ms/step"
for round in $(seq "$ROUNDS"); do
  for case in $CASES; do
    line=$(cd "$WORK" && "$MLIP" train "$case.yaml" -o "run_$case" 2>&1 | grep "^finished")
    seconds=$(echo "$line" | sed -E 's/.* in ([0-9.]+) s.*/\1/')
    awk -v c="$case" -v r="$round" -v s="$seconds" -v n="$STEPS" 'BEGIN { printf "%-12s %6s %10.2f\n", c, r, s * 1000 / n }'
    rm -rf "$WORK/run_$case"
  done
done
