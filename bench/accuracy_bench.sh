#!/usr/bin/env bash
# Accuracy benchmark (issue 3): se_e2_a with the reference settings and the schedule of a
# 1,000,000-step run (the learning rate stays 1e-3 until step 5,000) on the DFT water set
# (train data_0..2, batch 1, float64, seed 10); the run is stopped with Ctrl-C (which saves a
# checkpoint) once the checkpoint of the last requested step exists, and `mlip test` reports
# rmse_e and rmse_f on all 80 frames of data_3 for each requested checkpoint.
#
# usage: bench/accuracy_bench.sh [--steps 2000,20000] [--threads N] [--seed N] [--ema-decay D] [--keep DIR]
#   --seed N: the seed of the descriptor, the fitting net and the sampler (default: the
#             example's 1, 1 and 10)
#   --ema-decay D: training.ema_decay (default: the input's, i.e. mlip's default 0.99; 0 tests
#             the raw weights, as DeePMD-kit does)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MLIP="$ROOT/build/bin/mlip"
STEPS="2000,20000"
THREADS=2
WORK=""
SEED=""
EMA=""
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --keep) WORK="$2"; shift 2 ;;
    --seed) SEED="$2"; shift 2 ;;
    --ema-decay) EMA="$2"; shift 2 ;;
    *) echo "accuracy_bench.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
DATA="$(cd "$ROOT/.." && pwd)/shared/data/water"
[ -d "$DATA/data_0" ] || { echo "needs the DFT water set in ../shared/data/water"; exit 1; }
if [ -z "$WORK" ]; then WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT; fi
mkdir -p "$WORK"
LAST="${STEPS##*,}"
SAVE=$(echo "$STEPS" | tr ',' '\n' | sort -n | head -1)
sed -e "s#systems: \[data/train\]#systems: [$DATA/data_0, $DATA/data_1, $DATA/data_2]#" \
    -e "s#systems: \[data/valid\]#systems: [$DATA/data_3]#" -e "s/batch_size: auto/batch_size: 1/" \
    -e "s/save_freq: 1000/save_freq: $SAVE/" -e "s/max_ckpt_keep: .*//" "$ROOT/examples/water/input.yaml" > "$WORK/input.yaml"
echo "  max_ckpt_keep: 100" >> "$WORK/input.yaml"
if [ -n "$EMA" ]; then echo "  ema_decay: $EMA" >> "$WORK/input.yaml"; fi
if [ -n "$SEED" ]; then sed -i -e "s/^\(    seed:\) .*/\1 $SEED/" -e "s/^\(  seed:\) .*/\1 $SEED/" "$WORK/input.yaml"; fi
start=$(date +%s)
OMP_NUM_THREADS="$THREADS" "$MLIP" train "$WORK/input.yaml" -o "$WORK/run" > "$WORK/train.log" 2>&1 &
pid=$!
while [ ! -e "$WORK/run/model.ckpt-$LAST.pt" ]; do
  kill -0 "$pid" 2>/dev/null || { cat "$WORK/train.log"; exit 1; }
  sleep 5
done
kill -INT "$pid"; wait "$pid" || true
echo "# se_e2_a, reference settings, 1M-step schedule, batch 1, float64, seed ${SEED:-1/1/10}, ema_decay ${EMA:-0.99 (default)}; $(( $(date +%s) - start )) s"
echo "# step   rmse_e (eV/atom)   rmse_f (eV/A)   on data_3 (80 frames)"
for s in $(echo "$STEPS" | tr ',' ' '); do
  "$MLIP" test -m "$WORK/run/model.ckpt-$s.pt" -s "$DATA/data_3" > "$WORK/test-$s.log"
  e=$(grep "Energy RMSE/Natoms" "$WORK/test-$s.log" | tail -1 | awk '{print $4}')
  f=$(grep "Force  RMSE" "$WORK/test-$s.log" | tail -1 | awk '{print $4}')
  printf "%6s   %16s   %13s\n" "$s" "$e" "$f"
done
