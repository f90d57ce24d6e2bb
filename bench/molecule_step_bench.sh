#!/usr/bin/env bash
# The training step on a small molecule (issue 47): examples/ethanol/equivariant.yaml (correlation
# 3, 64 features, 2 layers, float32, batch 4 of 9 atoms) for --steps steps on --ranks ranks of one
# thread each (OMP_NUM_THREADS=1 mpirun -np R; 1: no launcher), for each mlip binary given,
# interleaved --rounds times in one run (this VM's speed moves by up to 2x between minutes): per
# run, the median ms/step over steps 200..end (rank 0's --step-times), and per binary the median
# of its runs.
#
# usage: bench/molecule_step_bench.sh [--ranks 2] [--steps 2000] [--rounds 3] MLIP [MLIP ...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RANKS=2
STEPS=2000
ROUNDS=3
BINS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) RANKS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) BINS+=("$(readlink -f "$1")"); shift ;;
  esac
done
[ ${#BINS[@]} -gt 0 ] || BINS=("$ROOT/build/bin/mlip")
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
ln -s "$ROOT/examples/ethanol/data" "$WORK/data"
sed -e "s/numb_steps: [0-9]*/numb_steps: $STEPS/" -e "s/save_freq: [0-9]*/save_freq: 1000000/" \
    -e "s/disp_freq: [0-9]*/disp_freq: 1000000/" "$ROOT/examples/ethanol/equivariant.yaml" > "$WORK/input.yaml"

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
printf "# ethanol, %s rank(s) x 1 thread, %s steps, median ms/step over steps 200-%s\n" "$RANKS" "$STEPS" "$STEPS"
printf "%-6s %-60s %10s\n" round binary ms/step
for round in $(seq "$ROUNDS"); do
  for b in "${!BINS[@]}"; do
    bin="${BINS[$b]}"
    rm -rf "$WORK/run"
    if [ "$RANKS" = 1 ]; then
      (cd "$WORK" && OMP_NUM_THREADS=1 "$bin" train input.yaml -o run --step-times times > log 2>&1)
    else
      (cd "$WORK" && OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$RANKS" "$bin" train input.yaml -o run \
        --step-times times > log 2>&1)
    fi
    ms=$(awk '!/^#/ && $1 >= 200 {print $2}' "$WORK/times" | median)
    echo "$ms" >> "$WORK/ms-$b"
    printf "%-6s %-60s %10.2f\n" "$round" "$bin" "$ms"
  done
done
for b in "${!BINS[@]}"; do
  printf "%-6s %-60s %10.2f\n" median "${BINS[$b]}" "$(median < "$WORK/ms-$b")"
done
