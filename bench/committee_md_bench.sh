#!/usr/bin/env bash
# What a committee costs in MD (docs/lammps.md "A committee of models"): the water example's
# box (96 atoms, or replicated) in LAMMPS with one model, and with a committee of four whose
# other three models run every out_freq steps, interleaved in each round so that the machine's
# drift hits every configuration alike. Prints LAMMPS' loop time per step and the committee's
# cost over the single model.
#
# usage: bench/committee_md_bench.sh <mlip> <m0.pt> <m1.pt> <m2.pt> <m3.pt>
#            [--steps N (1000)] [--rounds R (3)] [--replicate K (1: 96 atoms; 2: 768)] [--ranks P (1)]
#            [--freqs "100 10 1"]
set -euo pipefail
if [ $# -lt 5 ]; then
  sed -n '2,11p' "$0"
  exit 2
fi
MLIP="$(realpath "$1")"
MODELS=("$(realpath "$2")" "$(realpath "$3")" "$(realpath "$4")" "$(realpath "$5")")
shift 5
STEPS=1000 ROUNDS=3 REPLICATE=1 RANKS=1 FREQS="100 10 1"
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --replicate) REPLICATE="$2"; shift 2 ;;
    --ranks) RANKS="$2"; shift 2 ;;
    --freqs) FREQS="$2"; shift 2 ;;
    *) echo "committee_md_bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cp "$ROOT/examples/water/md/water.data" "$WORK/"

# run <name> <pair_style arguments>: the loop time per step, ms.
run() {
  local dir="$WORK/$1"
  mkdir -p "$dir"
  cat > "$dir/in.lammps" <<LAMMPS
units metal
atom_style atomic
boundary p p p
read_data ../water.data
replicate $REPLICATE $REPLICATE $REPLICATE
pair_style mlip $2
pair_coeff * * O H
neighbor 1.0 bin
velocity all create 600.0 20261129 loop geom
timestep 0.0005
fix nvt all nvt temp 600.0 600.0 0.05
thermo 1000
run $STEPS
LAMMPS
  local cmd=("$MLIP" lammps -in in.lammps -log log.lammps -screen none)
  [ "$RANKS" -gt 1 ] && cmd=(mpirun --allow-run-as-root --oversubscribe -np "$RANKS" "${cmd[@]}")
  (cd "$dir" && OMP_NUM_THREADS=$(( $(nproc) / RANKS > 0 ? $(nproc) / RANKS : 1 )) "${cmd[@]}" > /dev/null)
  awk -v steps="$STEPS" '/^Loop time of/ {printf "%.3f", 1000 * $4 / steps}' "$dir/log.lammps"
}

echo "water box x${REPLICATE}^3 ($((96 * REPLICATE * REPLICATE * REPLICATE)) atoms), $STEPS steps, $RANKS rank(s), $(nproc) cores"
declare -A SUM
for round in $(seq "$ROUNDS"); do
  line="round $round: one model $(run single "${MODELS[0]}") ms/step"
  SUM[single]=$(echo "${SUM[single]:-0} + $(awk -v steps="$STEPS" '/^Loop time of/ {print 1000 * $4 / steps}' "$WORK/single/log.lammps")" | bc -l)
  for f in $FREQS; do
    t=$(run "freq$f" "${MODELS[*]} out_freq $f out_file model_devi.out")
    SUM[$f]=$(echo "${SUM[$f]:-0} + $t" | bc -l)
    # pair_style mlip's own accounting (rank 0): the first model's time and the others'.
    own=$(awk '/pair_style mlip on rank 0: [0-9]+ calls/ {for (i = 1; i <= NF; i++) if ($i == "model") m = $(i + 1)}
               /committee.s other/ {for (i = 1; i <= NF; i++) if ($i == "model") o = $(i + 1)}
               END {printf "%.2f", o / m}' "$WORK/freq$f/log.lammps")
    line+="; committee of 4, out_freq $f: $t ms/step (other models / first model: ${own}x)"
  done
  echo "$line"
done
single=$(echo "${SUM[single]} / $ROUNDS" | bc -l)
printf "mean: one model %.3f ms/step\n" "$single"
for f in $FREQS; do
  mean=$(echo "${SUM[$f]} / $ROUNDS" | bc -l)
  printf "mean: committee of 4, out_freq %s: %.3f ms/step, %.3fx one model (the other models' share: %.1f%%)\n" \
    "$f" "$mean" "$(echo "$mean / $single" | bc -l)" "$(echo "100 * ($mean - $single) / $mean" | bc -l)"
done
