#!/usr/bin/env bash
# Fine-tuning at equal wall time on 3BPA: does a model pretrained on ethanol, fine-tuned on N
# 3BPA frames, beat the same model trained from scratch on those frames in the same time?
#
# (a) Pretraining: examples/ethanol/equivariant.yaml on the example's data (examples/ethanol/
#     README.md: 950 frames and the isolated H, C, O atoms, model.e0s: isolated), stopped at
#     --pretrain-seconds, frozen (or --pretrained: that frozen model, no pretraining).
# (b) For each N of --sizes and each seed of --seeds, both modes one after the other (the VM's
#     drift hits both alike): `mlip train` from scratch, and `mlip train --finetune <pretrained>`,
#     each stopped at --seconds, on train<N>.xyz with valid.xyz (bench/make_3bpa_sets.py: one
#     seeded split of 3BPA's train_300K.xyz; train50 is the first 50 of train200). The input is
#     the ethanol one with type_map [H, C, N, O] and model.e0s: {isolated: <3BPA iso_atoms.xyz>}
#     (the isolated C, H, N, O atoms, a file without config_type: that form takes its one-atom
#     frames, marked or not; docs/training.md "Reference energies"), its seeds set to the seed.
# (c) Each model frozen and tested with `mlip test --xyz` on test.xyz (the 250 other frames of
#     train_300K) and test_mixedT.xyz (train_mixedT.xyz less its frames equal to train_300K's):
#     energy RMSE in meV per molecule (27 atoms), force RMSE in meV/Å over every component and
#     over the N atoms' components (bench/molecule_rmse.py --species N).
# (d) A markdown table per run and the mean ± standard deviation (n - 1) over the seeds per
#     (N, mode).
#
# Schedules, as bench/molecule_bench.sh: a calibration run (--calibrate seconds) gives the step
# time and the time to make a frame, from which numb_steps is sized so that the exp learning
# rate reaches stop_lr at the budget; a run slower than planned is stopped at the budget by
# SIGINT (which saves a checkpoint). Scratch and fine-tuning runs of a size get the same
# numb_steps and learning-rate schedule (the 3BPA calibration runs from scratch on train200).
# Training runs use --ranks ranks under mpirun, one thread each (1: one process, every thread).
#
# usage: bench/finetune_bench.sh [--pretrain-seconds 600] [--seconds 300] [--seeds "1 2 3"]
#          [--sizes "50 200"] [--modes "scratch finetune"] [--ranks 2] [--calibrate 60]
#          [--work-dir DIR] [--mlip PATH] [--pretrained MODEL.pt] [--split-seed 0]
#          [--finetune-args "..."] [--test-frames K] [--quick]
#   --work-dir      where the sets, inputs, runs, logs and models go (default: a new folder
#                   under /tmp, kept and named at the end; the pretrained model is
#                   <dir>/pretrain.pt, for --pretrained next time)
#   --pretrained    a frozen model (ethanol equivariant.yaml's settings) to fine-tune from
#   --finetune-args more options for the fine-tuning runs' `mlip train`
#   --test-frames   test on the first K frames of each test set only (default: all)
#   --quick         a smoke test in about a minute: --pretrain-seconds 12 --seconds 8
#                   --calibrate 6 --sizes 50 --seeds 1 --test-frames 20 (options after it win)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MLIP="$ROOT/build/bin/mlip"
ETHANOL="$ROOT/examples/ethanol"
SRC3BPA="$ROOT/../shared/data/3bpa"
PRETRAIN_SECONDS=600
BUDGET=300
SEEDS="1 2 3"
SIZES="50 200"
MODES="scratch finetune"
RANKS=2
CALIBRATE=60
WORK=""
PRETRAINED=""
SPLIT_SEED=0
FINETUNE_ARGS=""
TEST_FRAMES=""
while [ $# -gt 0 ]; do
  case "$1" in
    --pretrain-seconds) PRETRAIN_SECONDS="$2"; shift 2 ;;
    --seconds) BUDGET="$2"; shift 2 ;;
    --seeds) SEEDS="$2"; shift 2 ;;
    --sizes) SIZES="$2"; shift 2 ;;
    --modes) MODES="$2"; shift 2 ;;
    --ranks) RANKS="$2"; shift 2 ;;
    --calibrate) CALIBRATE="$2"; shift 2 ;;
    --work-dir) WORK="$2"; shift 2 ;;
    --mlip) MLIP="$2"; shift 2 ;;
    --pretrained) PRETRAINED="$2"; shift 2 ;;
    --split-seed) SPLIT_SEED="$2"; shift 2 ;;
    --data) SRC3BPA="$2"; shift 2 ;;
    --finetune-args) FINETUNE_ARGS="$2"; shift 2 ;;
    --test-frames) TEST_FRAMES="$2"; shift 2 ;;
    --quick) PRETRAIN_SECONDS=12; BUDGET=8; CALIBRATE=6; SIZES=50; SEEDS=1; TEST_FRAMES=20; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "finetune_bench.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
die() { echo "finetune_bench.sh: $*" >&2; exit 1; }
[ -x "$MLIP" ] || die "no mlip binary at $MLIP (--mlip PATH)"
MLIP="$(readlink -f "$MLIP")"
for m in $MODES; do
  case "$m" in scratch|finetune) ;; *) echo "finetune_bench.sh: unknown mode '$m' (scratch, finetune)" >&2; exit 2 ;; esac
done
for n in $SIZES; do
  case "$n" in 50|200) ;; *) echo "finetune_bench.sh: --sizes takes 50 and 200 (the sets make_3bpa_sets.py makes), got '$n'" >&2; exit 2 ;; esac
done
FINETUNE=no
[[ " $MODES " == *" finetune "* ]] && FINETUNE=yes
# Fail before any training if the binary cannot fine-tune.
if [ "$FINETUNE" = yes ] && ! "$MLIP" train --help 2>&1 | grep -q -- "--finetune"; then
  die "$MLIP does not know 'mlip train --finetune' (not in its 'mlip train --help'); give a binary that does (--mlip), or run --modes scratch"
fi
if [ -n "$PRETRAINED" ]; then
  [ -f "$PRETRAINED" ] || die "--pretrained $PRETRAINED: no such file"
  PRETRAINED="$(readlink -f "$PRETRAINED")"
fi
if [ -z "$WORK" ]; then WORK="$(mktemp -d /tmp/finetune_bench.XXXXXX)"; fi
mkdir -p "$WORK"
WORK="$(readlink -f "$WORK")"
PY=/usr/bin/python3
RMSE=("$PY" "$ROOT/bench/molecule_rmse.py")
NCPU="$(nproc --all)"
now() { date +%s.%N; }
since() { "$PY" -c "print(f'{$(now) - $1:.0f}')"; }

# The 3BPA sets.
SETS="$WORK/data"
"$PY" "$ROOT/bench/make_3bpa_sets.py" "$SETS" --seed "$SPLIT_SEED" --data "$SRC3BPA" > "$WORK/sets.txt" ||
  die "make_3bpa_sets.py failed"
TESTS=(test test_mixedT)
for t in "${TESTS[@]}"; do
  if [ -n "$TEST_FRAMES" ]; then
    lines=$(( TEST_FRAMES * ($(head -1 "$SETS/$t.xyz") + 2) ))
    head -n "$lines" "$SETS/$t.xyz" > "$WORK/$t.xyz"
  else
    cp "$SETS/$t.xyz" "$WORK/$t.xyz"
  fi
done

# set_schedule <steps> <seed>: stdin's input with its steps, frequencies and seeds set.
set_schedule() {
  local decay=$(( $1 / 100 )); [ "$decay" -ge 1 ] || decay=1; [ "$decay" -le 500 ] || decay=500
  sed -e "s/^  numb_steps: .*/  numb_steps: $1/" -e "s/^  save_freq: .*/  save_freq: $1/" \
      -e "s/^  disp_freq: .*/  disp_freq: $(( $1 / 20 > 1 ? $1 / 20 : 1 ))/" \
      -e "s/^  decay_steps: .*/  decay_steps: $decay/" -e "s/^  seed: .*/  seed: $2/"
}
# ethanol_input <steps> <seed>
ethanol_input() {
  sed -e "s#\[data/train.xyz\]#[$ETHANOL/data/train.xyz]#" -e "s#\[data/valid.xyz\]#[$ETHANOL/data/valid.xyz]#" \
      "$ETHANOL/equivariant.yaml" | set_schedule "$1" "$2"
}
# bpa_input <N> <steps> <seed>: the ethanol input on 3BPA's train<N>.xyz and valid.xyz.
bpa_input() {
  sed -e "s/^  type_map: \[H, C, O\]/  type_map: [H, C, N, O]/" \
      -e "s#^  e0s: isolated#  e0s: {isolated: \"$SETS/iso_atoms.xyz\"}#" \
      -e "s#\[data/train.xyz\]#[$SETS/train$1.xyz]#" -e "s#\[data/valid.xyz\]#[$SETS/valid.xyz]#" \
      "$ETHANOL/equivariant.yaml" | set_schedule "$2" "$3"
}
# check_input <file> <pattern>...: each pattern must be a line of the input (the example changed?).
check_input() {
  local f="$1"; shift
  for p in "$@"; do grep -qF -- "$p" "$f" || die "$f: no line '$p' (examples/ethanol/equivariant.yaml changed? adapt finetune_bench.sh)"; done
}

# mlip_train <input> <folder> <seconds> [options]: stopped by SIGINT at <seconds>.
mlip_train() {
  local input="$1" out="$2" seconds="$3"; shift 3
  rm -rf "$out"
  local cmd=(timeout --preserve-status -s INT "$seconds" "$MLIP" train "$input" -o "$out" "$@")
  [ "$RANKS" -gt 1 ] && cmd=(env OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np "$RANKS" "${cmd[@]}")
  "${cmd[@]}" > "$out.txt" 2>&1 || true
  grep -qE "^(finished|interrupted at step) [0-9]+" "$out.txt" ||
    { echo "finetune_bench.sh: training $input failed ($out.txt):" >&2; tail -20 "$out.txt" >&2; exit 1; }
}
steps_done() { grep -oE "^(finished|interrupted at step) [0-9]+" "$1" | grep -oE "[0-9]+$" | tail -1; }

# plan_steps <step-times file> <seconds> <frames per rank>: numb_steps for that budget.
plan_steps() {
  "$PY" - "$1" "$2" "$3" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if not l.startswith('#') and l.strip()]
if not rows:
    sys.exit("the calibration run did no step: give --calibrate more seconds")
made = [r for r in rows if float(r[2]) > 0]
late = rows[len(made) + 10:] or rows[-10:]
step = statistics.mean(float(r[1]) - float(r[2]) for r in late)
make = statistics.median(float(r[2]) for r in made) if made else 0.0
print(max(20, int(0.97 * (float(sys.argv[2]) * 1000 - float(sys.argv[3]) * make) / step)))
PY
}

echo "# 3BPA fine-tuning at equal wall time, $(lscpu | sed -n 's/^Model name: *//p'), $NCPU cores, $RANKS rank(s); $("$MLIP" --version | head -1)"
echo "# sets (split seed $SPLIT_SEED, $SETS): $(grep -oE '^[a-zA-Z0-9_]+\.xyz: [0-9]+' "$WORK/sets.txt" | sed 's/: / /' | paste -sd, - | sed 's/,/, /g')"
echo "# $(grep '^isolated atoms' "$WORK/sets.txt")"

# (a) Pretraining.
if [ "$FINETUNE" = yes ]; then
  if [ -z "$PRETRAINED" ]; then
    ethanol_input 10000000 1 > "$WORK/pretrain-calibrate.yaml"
    mlip_train "$WORK/pretrain-calibrate.yaml" "$WORK/pretrain-calibrate" "$CALIBRATE" --step-times "$WORK/pretrain-calibrate.ms"
    steps=$(plan_steps "$WORK/pretrain-calibrate.ms" "$PRETRAIN_SECONDS" $(( 950 / RANKS ))) || die "pretraining calibration"
    ethanol_input "$steps" 1 > "$WORK/pretrain.yaml"
    t0=$(now)
    mlip_train "$WORK/pretrain.yaml" "$WORK/pretrain" "$PRETRAIN_SECONDS"
    "$MLIP" freeze -c "$WORK/pretrain" -o "$WORK/pretrain.pt" > /dev/null
    PRETRAINED="$WORK/pretrain.pt"
    echo "# pretrained on ethanol: $(steps_done "$WORK/pretrain.txt")/$steps steps in $(since "$t0") s (budget $PRETRAIN_SECONDS s): $PRETRAINED"
  else
    echo "# pretrained model given: $PRETRAINED"
  fi
fi

# (b) Calibration on 3BPA (from scratch, train200), then the runs.
bpa_input 200 10000000 1 > "$WORK/calibrate.yaml"
check_input "$WORK/calibrate.yaml" "  type_map: [H, C, N, O]" "  e0s: {isolated: \"$SETS/iso_atoms.xyz\"}" \
  "[$SETS/train200.xyz]" "[$SETS/valid.xyz]"
mlip_train "$WORK/calibrate.yaml" "$WORK/calibrate" "$CALIBRATE" --step-times "$WORK/calibrate.ms"
grep -q "isolated atoms .*iso_atoms.xyz): 4 system(s)" "$WORK/calibrate.txt" ||
  die "the 3BPA run did not take the 4 isolated atoms of iso_atoms.xyz as reference energies ($WORK/calibrate.txt)"

ROWS=()
row() { ROWS+=("$1"); echo "$1"; }
echo
echo "| N | mode | seed | steps | wall s | E test 300K meV/mol | F test 300K meV/Å | F(N atoms) 300K meV/Å | E mixedT meV/mol | F mixedT meV/Å | F(N atoms) mixedT meV/Å |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for n in $SIZES; do
  steps=$(plan_steps "$WORK/calibrate.ms" "$BUDGET" $(( n / RANKS > 0 ? n / RANKS : 1 ))) || die "3BPA calibration"
  for seed in $SEEDS; do
    for mode in $MODES; do
      run="$WORK/n$n-$mode-s$seed"
      bpa_input "$n" "$steps" "$seed" > "$run.yaml"
      extra=()
      # shellcheck disable=SC2206
      [ "$mode" = finetune ] && extra=(--finetune "$PRETRAINED" $FINETUNE_ARGS)
      t0=$(now)
      mlip_train "$run.yaml" "$run" "$BUDGET" "${extra[@]}"
      wall=$(since "$t0")
      "$MLIP" freeze -c "$run" -o "$run.pt" > /dev/null
      cells=()
      for t in "${TESTS[@]}"; do
        "$MLIP" test -m "$run.pt" -s "$WORK/$t.xyz" --xyz "$run.$t.xyz" > "$run.$t.txt" ||
          die "mlip test -m $run.pt -s $WORK/$t.xyz failed ($run.$t.txt)"
        result="$("${RMSE[@]}" "$WORK/$t.xyz" "$run.$t.xyz" mlip_energy mlip_forces --species N)"
        cells+=("$(grep -oE "energy_rmse_meV=[0-9.]+" <<< "$result" | cut -d= -f2)"
                "$(grep -oE "force_rmse_meV_per_A=[0-9.]+" <<< "$result" | cut -d= -f2)"
                "$(grep -oE "force_rmse_N_meV_per_A=[0-9.]+" <<< "$result" | cut -d= -f2)")
      done
      line="| $n | $mode | $seed | $(steps_done "$run.txt")/$steps | $wall |"
      for c in "${cells[@]}"; do line="$line $c |"; done
      row "$line"
    done
  done
done

# (d) Mean ± standard deviation over the seeds.
echo
echo "Mean ± standard deviation (n - 1) over the seeds:"
echo
echo "| N | mode | seeds | E test 300K meV/mol | F test 300K meV/Å | F(N atoms) 300K meV/Å | E mixedT meV/mol | F mixedT meV/Å | F(N atoms) mixedT meV/Å |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${ROWS[@]}" | "$PY" -c "
import collections, statistics, sys
groups = collections.OrderedDict()
for line in sys.stdin:
    cells = [c.strip() for c in line.strip().strip('|').split('|')]
    try:
        values = [float(c) for c in cells[5:11]]
    except (ValueError, IndexError):
        continue
    groups.setdefault((cells[0], cells[1]), []).append(values)
for (n, mode), rows in groups.items():
    out = []
    for column in zip(*rows):
        sd = f'{statistics.stdev(column):.1f}' if len(column) > 1 else '-'
        out.append(f'{statistics.mean(column):.1f} ± {sd}')
    print(f'| {n} | {mode} | {len(rows)} | ' + ' | '.join(out) + ' |')
"
echo
echo "# work folder: $WORK"
