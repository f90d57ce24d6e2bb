#!/usr/bin/env bash
# How a committee trains fastest (docs/training.md "A committee of models"): `mlip train
# --committee 4` on the water example (examples/water/quick.yaml, shortened), members side by
# side (the default: min(N, cores) at a time, cores / J threads each), one after another with
# every core (--committee-jobs 1), and all at once (--committee-jobs N), interleaved in each
# round. Prints each schedule's wall time.
#
# usage: bench/committee_train_bench.sh <mlip> [--members N (4)] [--steps S (400)] [--rounds R (2)]
set -euo pipefail
if [ $# -lt 1 ]; then
  sed -n '2,8p' "$0"
  exit 2
fi
MLIP="$(realpath "$1")"
shift
MEMBERS=4 STEPS=400 ROUNDS=2
while [ $# -gt 0 ]; do
  case "$1" in
    --members) MEMBERS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    *) echo "committee_train_bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
EX="$ROOT/examples/water"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
sed -e "s/^  numb_steps: .*/  numb_steps: $STEPS/" -e "s/^  save_freq: .*/  save_freq: $STEPS/" \
    -e "s#systems: \[data/#systems: [$EX/data/#" "$EX/quick.yaml" > "$WORK/input.yaml"
echo "water, $MEMBERS members of $STEPS steps, $(nproc) cores"
for round in $(seq "$ROUNDS"); do
  line="round $round:"
  for jobs in default 1 "$MEMBERS"; do
    rm -rf "$WORK/out"
    extra=()
    [ "$jobs" = default ] || extra=(--committee-jobs "$jobs")
    t0=$(date +%s.%N)
    "$MLIP" train "$WORK/input.yaml" --committee "$MEMBERS" "${extra[@]}" -o "$WORK/out" > "$WORK/log" 2>&1
    t1=$(date +%s.%N)
    line+=" jobs $jobs $(printf %.1f "$(echo "$t1 - $t0" | bc -l)") s;"
  done
  echo "$line"
done
