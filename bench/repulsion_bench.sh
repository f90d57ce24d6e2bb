#!/usr/bin/env bash
# What model.pair_repulsion costs (docs/repulsion.md): ZBL 0.5-1.0 Å on the water example, with
# and without, interleaved in each round so that the machine's drift hits both alike.
#
# 1. Training: examples/water quick.yaml (se_e2_a) and equivariant.yaml on their data, batch 1,
#    --steps steps; the median ms/step over steps 50.. (mlip train --step-times) and the ms to
#    make one frame (its neighbour list, its geometry, and with the repulsion its subtraction
#    from the labels; the trainer's closing line).
# 2. MD: those models (1 step trained: the cost does not depend on the weights) in LAMMPS on the
#    example's box replicated 2x2x2 (768 atoms), --md-steps force calls (`run` without
#    integrator: the same atoms every step), mlip's own inference and the TorchScript forward
#    (`evaluation torchscript`); LAMMPS' loop time per step.
#
# usage: bench/repulsion_bench.sh [--steps N (300)] [--md-steps N (200)] [--rounds R (2)]
#            [--threads T (2)] [--build-dir DIR (build)]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$ROOT/build"
STEPS=300 MD_STEPS=200 ROUNDS=2 THREADS=2
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --md-steps) MD_STEPS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --build-dir) BUILD_DIR="$(realpath "$2")"; shift 2 ;;
    *) echo "repulsion_bench.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
MLIP="$BUILD_DIR/bin/mlip"
EX="$ROOT/examples/water"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS="$THREADS"

# shellcheck source=bench/repulsion_input.sh
source "$ROOT/bench/repulsion_input.sh"

# input <example yaml> <steps> <with|without> <output yaml>
input() {
  repulsion_input "$EX" "$1" "$2" "$3" "$4" -e "s/^  disp_freq: .*/  disp_freq: $2/" -e "s/batch_size: auto/batch_size: 1/"
}

# train <name> <example yaml> <with|without>: "median_ms_per_step ms_per_frame_made"
train() {
  local dir="$WORK/train-$1-$3"
  rm -rf "$dir" && mkdir -p "$dir"
  input "$2" "$STEPS" "$3" "$dir/in.yaml"
  "$MLIP" train "$dir/in.yaml" -o "$dir/run" --step-times "$dir/times" > "$dir/log" 2>&1 || { cat "$dir/log"; exit 1; }
  local median made
  median=$(awk '!/^#/ && $1 >= 50 { print $2 }' "$dir/times" | sort -g | awk '{ v[NR] = $1 } END { print v[int(NR / 2) + 1] }')
  made=$(sed -n 's/.*frames made, \([0-9.]*\) ms each.*/\1/p' "$dir/log")
  echo "$median $made"
}

# The MD models: one step each.
for m in quick equivariant; do
  for r in without with; do
    input "$m.yaml" 1 "$r" "$WORK/$m-$r.yaml"
    "$MLIP" train "$WORK/$m-$r.yaml" -o "$WORK/$m-$r" > "$WORK/$m-$r.log" 2>&1 || { cat "$WORK/$m-$r.log"; exit 1; }
    "$MLIP" freeze -c "$WORK/$m-$r" -o "$WORK/$m-$r.pt" > /dev/null
  done
done
cp "$EX/md/water.data" "$WORK/"

# md <model.pt> <evaluation>: LAMMPS' loop time per step, ms.
md() {
  local dir="$WORK/md-$(basename "$1" .pt)-$2"
  rm -rf "$dir" && mkdir -p "$dir"
  cat > "$dir/in.lammps" <<LAMMPS
units metal
atom_style atomic
boundary p p p
read_data ../water.data
replicate 2 2 2
pair_style mlip $1 evaluation $2
pair_coeff * * O H
neighbor 1.0 bin
thermo $MD_STEPS
run $MD_STEPS
LAMMPS
  (cd "$dir" && "$MLIP" lammps -in in.lammps -log log.lammps -screen none > /dev/null)
  awk -v steps="$MD_STEPS" '/^Loop time of/ { printf "%.2f", 1000 * $4 / steps }' "$dir/log.lammps"
}

echo "# $(nproc) cores, OMP_NUM_THREADS=$THREADS; training: batch 1, $STEPS steps, median over steps 50..; MD: 768 atoms, $MD_STEPS force calls"
for round in $(seq "$ROUNDS"); do
  for m in quick equivariant; do
    for r in without with; do
      read -r median made <<< "$(train "$m" "$m.yaml" "$r")"
      echo "round $round train $m $r repulsion: $median ms/step, $made ms per frame made"
    done
  done
  for m in quick equivariant; do
    for e in auto torchscript; do
      for r in without with; do
        echo "round $round md $m ($e) $r repulsion: $(md "$WORK/$m-$r.pt" "$e") ms/step"
      done
    done
  done
done
