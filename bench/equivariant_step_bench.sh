#!/usr/bin/env bash
# The equivariant model's training step at the equivariant-accuracy issue's settings
# (examples/water/equivariant.yaml: r_max 4.5, l_max 1, 16 features, 3 layers, 8 Bessel
# functions, radial MLP 32 x 2, batch 1) on the DFT water set (data_0..2, 192 atoms), for each
# mlip binary given, interleaved in one run: each trains for --seconds (120) and is stopped by
# SIGINT; the median ms/step over the second half of its steps (every frame made and cached by
# then; long enough to span more than one of the VM's speed levels, which are about 1.5x apart
# and last a few hundred steps each), and the peak RSS; for float64 and float32 and correlation
# 1, 2 and 3 (and any PRECISION-cN[-wF][-nat] case, e.g. f32-c3-w32; -nat: the natural irreps
# only, model.pseudotensors: false).
#
# usage: bench/equivariant_step_bench.sh [--data DIR] [--seconds S] [--cases "f64 f32 c2 c3 f32-c3-w32"]
#                                        MLIP [MLIP ...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="$ROOT/../shared/data/water"
CASES="f64 f32 c2 c3"
SECONDS_EACH=120
BINS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --data) DATA="$2"; shift 2 ;;
    --cases) CASES="$2"; shift 2 ;;
    --seconds) SECONDS_EACH="$2"; shift 2 ;;
    *) BINS+=("$(readlink -f "$1")"); shift ;;
  esac
done
[ ${#BINS[@]} -gt 0 ] || BINS=("$ROOT/build/bin/mlip")
DATA="$(readlink -f "$DATA")"
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT

input() {  # input <case>: f64, f32, c2, c3 (float64), or PRECISION-cN[-wF][-nat] (f32-c3-w32: float32,
  # correlation 3, 32 features; -nat: pseudotensors false); correlation > 1 adds the readouts of every layer
  local spec="$1" precision=float64 corr=1 width="" natural=""
  case "$spec" in
    f64) ;; f32) precision=float32 ;; c2) corr=2 ;; c3) corr=3 ;;
    *) for part in ${spec//-/ }; do
         case "$part" in
           f64) precision=float64 ;; f32) precision=float32 ;; c[123]) corr=${part#c} ;; w[0-9]*) width=${part#w} ;;
           nat) natural=1 ;;
           *) echo "unknown case part '$part' in '$spec'" >&2; exit 2 ;;
         esac
       done ;;
  esac
  sed -n '/^model:/,/^learning_rate:/p' "$ROOT/examples/water/equivariant.yaml" | sed '$d' |
    sed "s/precision: float[0-9][0-9]/precision: $precision/" |
    { if [ -n "$width" ]; then sed "s/num_features: [0-9]*/num_features: $width/"; else cat; fi; }
  [ "$corr" = 1 ] || printf "  correlation: %s\n  readout: every_layer\n" "$corr"
  [ -z "$natural" ] || printf "  pseudotensors: false\n"
  cat <<YAML
learning_rate: {type: exp, start_lr: 0.005, stop_lr: 1.0e-4, decay_steps: 100}
loss: {type: ener, start_pref_e: 0.02, limit_pref_e: 1, start_pref_f: 1000, limit_pref_f: 1}
training:
  training_data: {systems: [$DATA/data_0, $DATA/data_1, $DATA/data_2], batch_size: 1}
  numb_steps: 100000
  seed: 10
  disp_freq: 1000
  save_freq: 100000
YAML
}

printf "%-6s %-60s %10s %8s %10s\n" case binary ms/step steps peak_MB
for c in $CASES; do
  input "$c" > "$WORK/$c.yaml"
  for bin in "${BINS[@]}"; do
    rm -rf "$WORK/run"
    /usr/bin/time -f "%M" -o "$WORK/rss" timeout --preserve-status -s INT "$SECONDS_EACH" \
      "$bin" train "$WORK/$c.yaml" -o "$WORK/run" --step-times "$WORK/t" > "$WORK/log" 2>&1 ||
      { rc=$?; [ $rc -eq 130 ] || { cat "$WORK/log"; exit 1; }; }
    ms=$(/usr/bin/python3 -c "
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if not l.startswith('#')]
print(f'{statistics.median(float(r[1]) for r in rows[len(rows) // 2:]):.1f}')" "$WORK/t")
    printf "%-6s %-60s %10s %8s %10d\n" "$c" "$bin" "$ms" "$(grep -vc '^#' "$WORK/t")" "$(( $(tail -1 "$WORK/rss") / 1024 ))"
  done
done
