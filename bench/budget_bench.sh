#!/usr/bin/env bash
# Accuracy at equal wall time on the DFT water set (../shared/data/water): each model trains on
# data_0..2 (320 frames of 192 atoms, batch 1, no validation) for a fixed wall-clock budget and
# is tested on all 80 frames of data_3. The learning-rate schedule is sized to the budget: a
# 20-step calibration run measures the step time and the time to make a frame (medians of steps
# 6-20, from --step-times), numb_steps = (budget - 320 frames' making) / step time, and the exp
# schedule reaches stop_lr at the last step.
#
# Models (--models):
#   se_e2_a        examples/water/quick.yaml's model (sel [46, 92], rcut 6), lr 1e-3 -> 1e-5
#   equivariant    examples/water/equivariant.yaml as it is (r_max 4.5, l_max 1, 16 features,
#                  3 layers, 8 Bessel functions, radial MLP 32 x 2), lr 5e-3 -> 1e-4
#   equivariant_c2 the same with correlation 2 and readouts of every layer
#   equivariant_c3 the same with correlation 3 and readouts of every layer
# Per row: ms/step, steps trained, wall seconds of the training run, and the test set's energy
# RMSE per atom (eV/atom) and force RMSE (eV/Å).
#
# usage: bench/budget_bench.sh [--budget S] [--models "se_e2_a equivariant ..."] [--mlip PATH]
#                              [--data DIR] [--keep DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MLIP="$ROOT/build/bin/mlip"
DATA="$ROOT/../shared/data/water"
BUDGET=300
MODELS="se_e2_a equivariant equivariant_c2"
KEEP=""
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) BUDGET="$2"; shift 2 ;;
    --models) MODELS="$2"; shift 2 ;;
    --mlip) MLIP="$2"; shift 2 ;;
    --data) DATA="$2"; shift 2 ;;
    --keep) KEEP="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
MLIP="$(readlink -f "$MLIP")"
DATA="$(readlink -f "$DATA")"
[ -d "$DATA/data_3" ] || { echo "no water data at $DATA (expected data_0 .. data_3)" >&2; exit 1; }
if [ -n "$KEEP" ]; then WORK="$KEEP"; mkdir -p "$WORK"; else WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT; fi
cd "$WORK"

# model_section <name>: the model section and the learning rates "start stop" of a bench model.
model_section() {
  case "$1" in
    se_e2_a)
      sed -n '/^model:/,/^learning_rate:/p' "$ROOT/examples/water/quick.yaml" | sed '$d'
      echo "LR 0.001 1.0e-5" ;;
    equivariant*)
      sed -n '/^model:/,/^learning_rate:/p' "$ROOT/examples/water/equivariant.yaml" | sed '$d'
      case "$1" in
        equivariant_c2) printf "  correlation: 2\n  readout: every_layer\n" ;;
        equivariant_c3) printf "  correlation: 3\n  readout: every_layer\n" ;;
      esac
      echo "LR 0.005 1.0e-4" ;;
    *) echo "unknown model $1" >&2; exit 2 ;;
  esac
}

# input <name> <steps> <decay_steps>: a training input on data_0..2.
input() {
  local section lr
  section="$(model_section "$1")"
  lr="$(grep '^LR ' <<< "$section")"
  grep -v '^LR ' <<< "$section"
  cat <<YAML
learning_rate: {type: exp, start_lr: $(cut -d' ' -f2 <<< "$lr"), stop_lr: $(cut -d' ' -f3 <<< "$lr"), decay_steps: $3}
loss: {type: ener, start_pref_e: 0.02, limit_pref_e: 1, start_pref_f: 1000, limit_pref_f: 1}
training:
  training_data: {systems: [$DATA/data_0, $DATA/data_1, $DATA/data_2], batch_size: 1}
  numb_steps: $2
  seed: 10
  disp_freq: $(( $2 > 100 ? $2 / 10 : 10 ))
  save_freq: $2
YAML
}

printf "%-16s %8s %8s %8s %14s %12s\n" model ms/step steps wall_s "rmse_e/atom" rmse_f
for model in $MODELS; do
  input "$model" 20 10 > "$model-calibrate.yaml"
  "$MLIP" train "$model-calibrate.yaml" -o "$model-calibrate" --step-times "$model-calibrate.ms" > /dev/null
  # The step time without making frames (each of the 320 frames is made once, in the first
  # epoch, and cached): numb_steps fills the budget less the time to make every frame once.
  read -r ms steps < <(/usr/bin/python3 -c "
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if not l.startswith('#')]
step = statistics.median(float(r[1]) - float(r[2]) for r in rows[5:])
make = statistics.median(float(r[2]) for r in rows[5:])
print(f'{step:.1f}', max(20, int(($BUDGET * 1000 - 320 * make) / step)))" "$model-calibrate.ms")
  input "$model" "$steps" "$(( steps / 200 > 1 ? steps / 200 : 1 ))" > "$model.yaml"
  t0=$(date +%s.%N)
  "$MLIP" train "$model.yaml" -o "$model" > "$model.train.txt"
  wall=$(/usr/bin/python3 -c "print(f'{$(date +%s.%N) - $t0:.0f}')")
  "$MLIP" freeze -c "$model" -o "$model.pt" > /dev/null
  "$MLIP" test -m "$model.pt" -s "$DATA/data_3" > "$model.test.txt"
  e=$(grep "Energy RMSE/Natoms" "$model.test.txt" | tail -1 | awk '{print $4}')
  f=$(grep "Force  RMSE" "$model.test.txt" | tail -1 | awk '{print $4}')
  printf "%-16s %8s %8s %8s %14.5f %12.4f\n" "$model" "$ms" "$steps" "$wall" "$e" "$f"
done
