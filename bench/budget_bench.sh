#!/usr/bin/env bash
# Accuracy at equal wall time on the DFT water set (../shared/data/water): each model trains on
# data_0..2 (320 frames of 192 atoms, batch 1, no validation) for a fixed wall-clock budget and
# is tested on all 80 frames of data_3. The learning-rate schedule is sized to the budget: a
# calibration run (--calibrate seconds, 60) measures the step time and the time to make a frame
# (from --step-times), numb_steps = (budget - 320 frames' making) / step time, and the exp
# schedule reaches stop_lr at the last step. A run still going at the budget is stopped there.
#
# Models (--models):
#   se_e2_a               examples/water/quick.yaml's model (sel [46, 92], rcut 6), lr 1e-3 -> 1e-5
#   equivariant_table     the equivariant-accuracy issue's settings (r_max 4.5, l_max 1, 16
#                         features, 3 layers, 8 Bessel functions, radial MLP 32 x 2), lr 5e-3 -> 1e-4
#   equivariant_table_c2  the same with correlation 2 and readouts of every layer
#   equivariant_table_c3  the same with correlation 3 and readouts of every layer
#   equivariant           the recommended settings: examples/water/equivariant.yaml's model, learning
#                         rates, loss and training.ema_decay
#   <file>.yaml           the same from another input file
#   <model>:N             that model trained by N ranks of one thread each (mpirun -np N with
#                         OMP_NUM_THREADS=1; batch 1 per rank, so N frames per step, and start_lr
#                         times N: learning_rate.scale_by_worker's default)
# The models without a loss section of their own use the issue's loss (energy prefactor 0.02 -> 1,
# forces 1000 -> 1).
# Per row: ms/step (calibrated; a step is N frames with N ranks), steps trained/planned, wall
# seconds of the training run, and the test set's energy RMSE per atom (eV/atom) and force RMSE
# (eV/Å).
#
# usage: bench/budget_bench.sh [--budget S] [--calibrate S] [--models "se_e2_a equivariant:2 ..."] [--mlip PATH]
#                              [--data DIR] [--keep DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MLIP="$ROOT/build/bin/mlip"
DATA="$ROOT/../shared/data/water"
BUDGET=300
CALIBRATE=60
MODELS="se_e2_a equivariant_table equivariant"
KEEP=""
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) BUDGET="$2"; shift 2 ;;
    --calibrate) CALIBRATE="$2"; shift 2 ;;
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

# The equivariant model at the settings of the equivariant-accuracy issue's table.
table_model() {
  cat <<YAML
model:
  type: equivariant
  type_map: [O, H]
  r_max: 4.5
  num_features: 16
  l_max: 1
  parity: true
  num_layers: 3
  num_bessels: 8
  polynomial_p: 6
  radial_width: 32
  radial_depth: 2
  avg_num_neighbors: auto
  precision: float64
  seed: 1
YAML
}

# section <file> <name>: the top-level section <name> of a YAML input, its header included.
section() { sed -n "/^$2:/,/^[a-z_]*:/p" "$1" | sed '1!{/^[a-z_]*:/d}'; }

# model_section <name>: the model section, "LR start stop", and optionally the loss section of
# a bench model.
model_section() {
  case "$1" in
    se_e2_a)
      section "$ROOT/examples/water/quick.yaml" model
      echo "LR 0.001 1.0e-5" ;;
    equivariant_table*)
      table_model
      case "$1" in
        equivariant_table_c2) printf "  correlation: 2\n  readout: every_layer\n" ;;
        equivariant_table_c3) printf "  correlation: 3\n  readout: every_layer\n" ;;
      esac
      echo "LR 0.005 1.0e-4" ;;
    equivariant | *.yaml)
      local file="$1"
      [ "$1" = equivariant ] && file="$ROOT/examples/water/equivariant.yaml"
      section "$file" model
      echo "LR $(section "$file" learning_rate | awk '/start_lr:/ {print $2}') $(section "$file" learning_rate | awk '/stop_lr:/ {print $2}')"
      section "$file" loss | sed 's/^/LOSS /'
      section "$file" training | awk '/^  ema_decay:/ {print "EMA", $2}' ;;
    *) echo "unknown model $1" >&2; exit 2 ;;
  esac
}

# input <name> <steps> <decay_steps>: a training input on data_0..2.
input() {
  local section lr
  section="$(model_section "$1")"
  lr="$(grep '^LR ' <<< "$section")"
  grep -v '^LR \|^LOSS \|^EMA ' <<< "$section"
  echo "learning_rate: {type: exp, start_lr: $(cut -d' ' -f2 <<< "$lr"), stop_lr: $(cut -d' ' -f3 <<< "$lr"), decay_steps: $3}"
  if grep -q '^LOSS ' <<< "$section"; then
    grep '^LOSS ' <<< "$section" | sed 's/^LOSS //'
  else
    echo "loss: {type: ener, start_pref_e: 0.02, limit_pref_e: 1, start_pref_f: 1000, limit_pref_f: 1}"
  fi
  cat <<YAML
training:
  training_data: {systems: [$DATA/data_0, $DATA/data_1, $DATA/data_2], batch_size: 1}
  numb_steps: $2
  seed: 10
  disp_freq: $(( $2 > 100 ? $2 / 10 : 10 ))
  save_freq: $2
YAML
  grep '^EMA ' <<< "$section" | sed 's/^EMA /  ema_decay: /' || true
}

# train <ranks> <input> <output folder> [options]: mlip train alone, or under mpirun with one
# thread per rank, stopped by SIGINT at the budget when still running then; its output in
# <output folder>.txt. Fails unless the run finished or saved a checkpoint when interrupted.
train() {
  local ranks="$1" input="$2" output="$3" seconds="$4"
  shift 4
  # Under mpirun each rank gets its own SIGINT (mpirun, when it gets one, may kill the ranks
  # before they have saved); the ranks agree on the step to stop after.
  local cmd=(timeout --preserve-status -s INT "$seconds" "$MLIP" train "$input" -o "$output" "$@")
  [ "$ranks" -gt 1 ] && cmd=(env OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np "$ranks" "${cmd[@]}")
  "${cmd[@]}" > "$output.txt" 2>&1 || true
  grep -qE "^(finished|interrupted at step) [0-9]+" "$output.txt" ||
    { echo "training $input failed:" >&2; tail -20 "$output.txt" >&2; exit 1; }
}

printf "%-22s %8s %12s %8s %14s %12s\n" model ms/step steps wall_s "rmse_e/atom" rmse_f
for spec in $MODELS; do
  model="${spec%%:*}"
  ranks=1
  [ "$model" != "$spec" ] && ranks="${spec##*:}"
  tag="$(basename "$model" .yaml)"
  [ "$ranks" -gt 1 ] && tag="$tag-${ranks}ranks"
  # Calibration: CALIBRATE seconds of training (stopped by SIGINT), the step time without making
  # frames (the mean over the steps after the first epoch, when every frame has been made once
  # and cached) and the time to make a frame. numb_steps fills the budget less the time to make
  # every frame once. This VM's speed switches between two levels (~1.5x apart, for stretches of
  # a few hundred steps, in any process at any age), so the estimate can be off either way: the
  # training run is stopped at the budget (SIGINT, which saves a checkpoint) when it is slower.
  input "$model" 100000 1000 > "$tag-calibrate.yaml"
  train "$ranks" "$tag-calibrate.yaml" "$tag-calibrate" "$CALIBRATE" --step-times "$tag-calibrate.ms"
  read -r ms steps < <(/usr/bin/python3 -c "
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if not l.startswith('#')]
late = rows[400:] if len(rows) > 420 else rows[-20:]
step = statistics.mean(float(r[1]) - float(r[2]) for r in late)
makes = [float(r[2]) for r in rows if float(r[2]) > 0]  # none when every frame was made before step 1
make = statistics.median(makes) if makes else 0.0
print(f'{step:.1f}', max(20, int(($BUDGET * 1000 - 320 / $ranks * make) / step)))" "$tag-calibrate.ms")
  input "$model" "$steps" "$(( steps / 200 > 1 ? steps / 200 : 1 ))" > "$tag.input.yaml"
  t0=$(date +%s.%N)
  train "$ranks" "$tag.input.yaml" "$tag" "$BUDGET"
  trained=$(grep -oE "^(finished|interrupted at step) [0-9]+" "$tag.txt" | grep -oE "[0-9]+$")
  wall=$(/usr/bin/python3 -c "print(f'{$(date +%s.%N) - $t0:.0f}')")
  "$MLIP" freeze -c "$tag" -o "$tag.pt" > /dev/null
  "$MLIP" test -m "$tag.pt" -s "$DATA/data_3" > "$tag.test.txt"
  e=$(grep "Energy RMSE/Natoms" "$tag.test.txt" | tail -1 | awk '{print $4}')
  f=$(grep "Force  RMSE" "$tag.test.txt" | tail -1 | awk '{print $4}')
  printf "%-22s %8s %12s %8s %14.5f %12.4f\n" "$tag" "$ms" "$trained/$steps" "$wall" "$e" "$f"
done
