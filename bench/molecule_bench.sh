#!/usr/bin/env bash
# Molecules at equal wall time, beside MACE (bench/README.md "Molecules at equal wall time"):
# each model trains on examples/ethanol/data/train.xyz (the set's 1,000 training configurations
# less the last 50, which are data/valid.xyz, plus the isolated H, C and O atoms as reference
# energies) for a wall-clock budget on this machine's cores, and is tested on data/test.xyz (the
# set's test_MD.xyz, 1,000 configurations at 300 K): energy RMSE in meV per molecule and force
# RMSE in meV/Å over every component, both from bench/molecule_rmse.py, per seed, then the mean
# and the range over the seeds.
#
# The schedule is sized to the budget by a calibration run (--calibrate seconds):
#   mlip: the step time after the first epoch and the time to make a frame give numb_steps
#         (the exp learning rate reaches stop_lr at the last step); the run is stopped at the
#         budget (SIGINT, which saves a checkpoint) if it is slower than planned.
#   MACE: the time to its first validation and per epoch (validation included) give
#         max_num_epochs; stage two (--swa: higher energy weight, lower learning rate) starts at
#         80% of the epochs, as in MACE's README (1200 of 1500). A run still going at the budget
#         plus 120 s is stopped and reported as such.
#
# Models (--models):
#   <input>.yaml[:N]  an mlip input (default: examples/ethanol/equivariant.yaml) on the example's
#                     data, under mpirun with N ranks of one thread each (default: one process
#                     with every thread); its seeds and steps replaced
#   equivariant[:N]   examples/ethanol/equivariant.yaml
#   se_e2_a[:N]       examples/ethanol/se_e2_a.yaml
#   mace-f64, mace-f32  pip mace-torch: 32 channels, max_L 1 (32x0e + 32x1o), correlation 3,
#                     2 interactions, r_max 5, E0s from the isolated atoms, batch 10, EMA 0.99,
#                     AMSGrad, stage two (--swa), float64 or float32, on the CPU
#
# usage: bench/molecule_bench.sh [--budgets "600 1800"] [--seeds "1 2 3"] [--calibrate S]
#          [--models "equivariant:2 mace-f64 mace-f32"] [--mlip PATH] [--python PY]
#          [--peers DIR] [--keep DIR]
#   --python  the Python with torch for MACE (default ~/.cache/mlip/torch-2.11.0/bin/python,
#             made by tools/setup.sh --torch pip); --peers: where mace-torch and its needs are
#             (default ~/.cache/mlip/peers-site; bench/mace_peer_bench.py says how to install)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MLIP="$ROOT/build/bin/mlip"
DATA="$ROOT/examples/ethanol/data"
BUDGETS="600 1800"
SEEDS="1 2 3"
MODELS="equivariant:2 mace-f64 mace-f32"
CALIBRATE=90
PY="$HOME/.cache/mlip/torch-2.11.0/bin/python"
PEERS="$HOME/.cache/mlip/peers-site"
KEEP=""
while [ $# -gt 0 ]; do
  case "$1" in
    --budgets) BUDGETS="$2"; shift 2 ;;
    --seeds) SEEDS="$2"; shift 2 ;;
    --calibrate) CALIBRATE="$2"; shift 2 ;;
    --models) MODELS="$2"; shift 2 ;;
    --mlip) MLIP="$2"; shift 2 ;;
    --python) PY="$2"; shift 2 ;;
    --peers) PEERS="$2"; shift 2 ;;
    --keep) KEEP="$2"; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "molecule_bench.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
MLIP="$(readlink -f "$MLIP")"
RMSE=(/usr/bin/python3 "$ROOT/bench/molecule_rmse.py")
NCPU="$(nproc)"
if [ -n "$KEEP" ]; then WORK="$(readlink -f "$KEEP")"; mkdir -p "$WORK"; else WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT; fi
now() { date +%s.%N; }
since() { /usr/bin/python3 -c "print(f'{$(now) - $1:.0f}')"; }

# MACE reads REF_energy / REF_forces (its default keys; `energy` clashes with ASE's calculator).
for f in train valid test; do
  sed -e 's/ energy=/ REF_energy=/' -e 's/:forces:R:3/:REF_forces:R:3/' "$DATA/$f.xyz" > "$WORK/mace_$f.xyz"
done

# mlip_input <yaml> <numb_steps> <seed>: the input on the example's data with its steps and seeds.
mlip_input() {
  local decay=$(( $2 / 100 )); [ "$decay" -ge 1 ] || decay=1; [ "$decay" -le 500 ] || decay=500
  sed -e "s#\[data/train.xyz\]#[$DATA/train.xyz]#" -e "s#\[data/valid.xyz\]#[$DATA/valid.xyz]#" \
      -e "s/^  numb_steps: .*/  numb_steps: $2/" -e "s/^  save_freq: .*/  save_freq: $2/" \
      -e "s/^  disp_freq: .*/  disp_freq: $(( $2 / 20 > 1 ? $2 / 20 : 1 ))/" \
      -e "s/^  decay_steps: .*/  decay_steps: $decay/" -e "s/^  seed: .*/  seed: $3/" "$1"
}

# mlip_train <ranks> <input> <folder> <seconds> [options]: stopped by SIGINT at <seconds>.
mlip_train() {
  local ranks="$1" input="$2" out="$3" seconds="$4"; shift 4
  local cmd=(timeout --preserve-status -s INT "$seconds" "$MLIP" train "$input" -o "$out" "$@")
  [ "$ranks" -gt 1 ] && cmd=(env OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np "$ranks" "${cmd[@]}")
  "${cmd[@]}" > "$out.txt" 2>&1 || true
  grep -qE "^(finished|interrupted at step) [0-9]+" "$out.txt" ||
    { echo "molecule_bench.sh: training $input failed:" >&2; tail -20 "$out.txt" >&2; exit 1; }
}

# mace_train <dtype> <seed> <epochs> <swa start or 0> <folder> <seconds>
mace_train() {
  local swa=()
  [ "$4" -gt 0 ] && swa=(--swa --start_swa="$4")
  mkdir -p "$5"
  (cd "$5" && OMP_NUM_THREADS="$NCPU" PYTHONPATH="$ROOT/bench/mace_shim:$PEERS" timeout -s INT "$6" "$PY" -m mace.cli.run_train \
     --name=mace --train_file="$WORK/mace_train.xyz" --valid_file="$WORK/mace_valid.xyz" --E0s=isolated \
     --energy_key=REF_energy --forces_key=REF_forces --model=MACE --num_channels=32 --max_L=1 \
     --correlation=3 --num_interactions=2 --r_max=5.0 --batch_size=10 --valid_batch_size=10 \
     --max_num_epochs="$3" "${swa[@]}" --ema --ema_decay=0.99 --amsgrad --default_dtype="$1" \
     --device=cpu --seed="$2" --eval_interval=1 > train.log 2>&1) || true
}

ROWS=()
row() { ROWS+=("$1"); echo "$1"; }
echo "# ethanol, $(lscpu | sed -n 's/^Model name: *//p'), $NCPU cores; $("$MLIP" --version | head -1); mace-torch $(PYTHONPATH="$PEERS" "$PY" -c 'import mace; print(mace.__version__)' 2>/dev/null || echo '?')"
echo "| model | budget s | seed | trained | wall s | energy RMSE, meV/molecule | force RMSE, meV/Å |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for spec in $MODELS; do
  model="${spec%%:*}"
  ranks=1
  [ "$model" != "$spec" ] && ranks="${spec##*:}"
  case "$model" in
    equivariant|se_e2_a) yaml="$ROOT/examples/ethanol/$model.yaml" ;;
    mace-f64|mace-f32) yaml="" ;;
    *.yaml) yaml="$(readlink -f "$model")" ;;
    *) echo "molecule_bench.sh: unknown model '$model'" >&2; exit 2 ;;
  esac
  tag="$(basename "$model" .yaml)"; [ "$ranks" -gt 1 ] && tag="$tag-${ranks}ranks"
  if [ -n "$yaml" ]; then
    # Calibration: the step time once every frame is made (after the first epoch), and the time
    # to make a frame.
    mlip_input "$yaml" 10000000 1 > "$WORK/$tag-calibrate.yaml"
    mlip_train "$ranks" "$WORK/$tag-calibrate.yaml" "$WORK/$tag-calibrate" "$CALIBRATE" --step-times "$WORK/$tag-calibrate.ms"
  else
    dtype=float64; [ "$model" = mace-f32 ] && dtype=float32
    t0=$(now)
    mace_train "$dtype" 1 100000 0 "$WORK/$tag-calibrate" "$CALIBRATE"
    # Seconds to the initial validation (start-up) and per epoch, from MACE's log's timestamps.
    read -r mace_start mace_epoch < <(/usr/bin/python3 - "$WORK/$tag-calibrate/train.log" "$t0" <<'PY'
import datetime, re, sys
t0 = float(sys.argv[2])
times = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) INFO: (Initial|Epoch (\d+)):", line)
    if m:
        t = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp()
        times.setdefault(-1 if m.group(2) == "Initial" else int(m.group(3)), t)
if -1 not in times or len(times) < 2:
    sys.exit("MACE's calibration run reached no epoch: give --calibrate more seconds")
epochs = sorted(k for k in times if k >= 0)
per_epoch = (times[epochs[-1]] - times[-1]) / (epochs[-1] + 1)
print(f"{times[-1] - t0:.1f} {per_epoch:.2f}")
PY
    )
  fi
  for budget in $BUDGETS; do
    for seed in $SEEDS; do
      run="$WORK/$tag-$budget-s$seed"
      t0=$(now)
      if [ -n "$yaml" ]; then
        steps=$(/usr/bin/python3 - "$WORK/$tag-calibrate.ms" "$budget" "$ranks" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if not l.startswith('#')]
made = [r for r in rows if float(r[2]) > 0]
late = [r for r in rows[len(made) + 10:]] or rows[-10:]
step = statistics.mean(float(r[1]) - float(r[2]) for r in late)
make = statistics.median(float(r[2]) for r in made) if made else 0.0
frames = 950 / int(sys.argv[3])
print(max(20, int(0.97 * (float(sys.argv[2]) * 1000 - frames * make) / step)))
PY
        )
        mlip_input "$yaml" "$steps" "$seed" > "$run.yaml"
        mlip_train "$ranks" "$run.yaml" "$run" "$budget"
        wall=$(since "$t0")
        trained="$(grep -oE "^(finished|interrupted at step) [0-9]+" "$run.txt" | grep -oE "[0-9]+$")/$steps steps"
        "$MLIP" freeze -c "$run" -o "$run.pt" > /dev/null
        "$MLIP" test -m "$run.pt" -s "$DATA/test.xyz" --xyz "$run.test.xyz" > "$run.test.txt"
        result="$("${RMSE[@]}" "$DATA/test.xyz" "$run.test.xyz" mlip_energy mlip_forces)"
      else
        epochs=$(/usr/bin/python3 -c "print(max(2, int(0.95 * ($budget - $mace_start - 30) / $mace_epoch)))")
        swa=$(( epochs * 8 / 10 )); [ "$swa" -ge 1 ] || swa=1
        mace_train "$dtype" "$seed" "$epochs" "$swa" "$run" $(( budget + 120 ))
        wall=$(since "$t0")
        trained="$(grep -cE "INFO: Epoch [0-9]+:" "$run/train.log" || true)/$epochs epochs"
        model_file="$run/mace_stagetwo.model"; [ -f "$model_file" ] || model_file="$run/mace.model"
        if [ ! -f "$model_file" ]; then
          row "| $tag | $budget | $seed | $trained | $wall | no model (over the budget plus 120 s?) | |"
          continue
        fi
        PYTHONPATH="$PEERS" "$PY" -m mace.cli.eval_configs --configs "$WORK/mace_test.xyz" --model "$model_file" \
          --output "$run/test.xyz" --default_dtype "$dtype" --device cpu > "$run/eval.log" 2>&1
        result="$("${RMSE[@]}" "$WORK/mace_test.xyz" "$run/test.xyz" MACE_energy MACE_forces)"
      fi
      e=$(grep -oE "energy_rmse_meV=[0-9.]+" <<< "$result" | cut -d= -f2)
      f=$(grep -oE "force_rmse_meV_per_A=[0-9.]+" <<< "$result" | cut -d= -f2)
      row "| $tag | $budget | $seed | $trained | $wall | $e | $f |"
    done
  done
done
echo
echo "Mean (range) over the seeds:"
echo
echo "| model | budget s | seeds | energy RMSE, meV/molecule | force RMSE, meV/Å |"
echo "|---|---:|---:|---|---|"
printf '%s\n' "${ROWS[@]}" | /usr/bin/python3 -c "
import collections, sys
groups = collections.OrderedDict()
for line in sys.stdin:
    cells = [c.strip() for c in line.strip().strip('|').split('|')]
    try:
        values = (float(cells[5]), float(cells[6]))
    except (ValueError, IndexError):
        continue
    groups.setdefault((cells[0], cells[1]), []).append(values)
for (model, budget), values in groups.items():
    e = [v[0] for v in values]; f = [v[1] for v in values]
    print(f'| {model} | {budget} | {len(values)} | {sum(e) / len(e):.1f} ({min(e):.1f}-{max(e):.1f}) | {sum(f) / len(f):.1f} ({min(f):.1f}-{max(f):.1f}) |')
"
