#!/bin/bash
# Training on sets larger than memory (docs/data.md): peak memory, start-up and step time as the
# set grows from 400 to 100,000 frames of 192 atoms, and for 5,000 small-molecule systems.
#
#   bash bench/data_scale_bench.sh            # all sets (needs ~1.2 GB of disk in $WORK)
#   MLIP_BENCH_BEFORE=/path/to/old/mlip bash bench/data_scale_bench.sh   # also an older build
#
# Model: the water example's reference se_e2_a (examples/water/quick.yaml: sel [46, 92],
# rcut 6 Å, float64), batch 1, default cache budget and one data worker unless a row says
# otherwise. Columns: peak resident memory (GNU time), seconds from the start to the end of step
# 1 (the trainer's "first step done" line), median ms/step over the last 100 steps (--step-times),
# steps that waited for data (the trainer's "waited for data" line). The 400-frame row runs 600
# steps so that its last 100 steps find every frame cached (the fully cached reference); the
# others run 200 steps, each frame used once at most (nothing cached twice).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MLIP="${MLIP:-$ROOT/build/bin/mlip}"
WORK="${MLIP_BENCH_DIR:-/tmp/mlip-data-scale-bench}"
PY=/usr/bin/python3   # Debian's python3 with python3-numpy (tools/setup.sh)
mkdir -p "$WORK"

make_set() {  # name kind count
  if [ ! -e "$WORK/$1/.done" ]; then
    echo "making $1 ($2 $3) ..." >&2
    rm -rf "$WORK/$1"
    "$PY" "$ROOT/bench/make_scale_sets.py" "$WORK/$1" "$2" "$3"
    touch "$WORK/$1/.done"
  fi
}
make_set f400 frames 400
make_set f10000 frames 10000
make_set f100000 frames 100000
make_set mol5000 molecules 5000

input() {  # systems steps extra-training-lines
  sed -e '/^training:/,$d' "$ROOT/examples/water/quick.yaml"
  cat <<YAML
training:
  training_data:
    systems: [$1]
    batch_size: 1
  numb_steps: $2
  seed: 10
  disp_freq: 100
  save_freq: $2
$3
YAML
}

printf "| set | build | options | peak memory (MB) | start to step 1 (s) | ms/step (median, last 100) | steps that waited |\n"
printf "|---|---|---|---:|---:|---:|---:|\n"
run() {  # label binary systems steps extra
  local label="$1" bin="$2" systems="$3" steps="$4" extra="${5:-}"
  local dir="$WORK/run-$label-$(basename "$bin")-$RANDOM"
  mkdir -p "$dir"
  input "$systems" "$steps" "$extra" > "$dir/input.yaml"
  local times=""
  if "$bin" train --help 2>&1 | grep -q -- --step-times; then times="--step-times $dir/steps.txt"; fi
  ( cd "$dir" && /usr/bin/time -f "%M" -o "$dir/rss" "$bin" train input.yaml -o out $times > "$dir/log" 2>&1 ) || {
    echo "| $label | $(basename "$(dirname "$(dirname "$bin")")") | failed: $(tail -1 "$dir/log") |"; return; }
  local rss=$(( $(tail -1 "$dir/rss") / 1024 ))
  local first=$(sed -n 's/^first step done \([0-9.]*\) s.*/\1/p' "$dir/log")
  local waited=$(sed -n 's/^waited for data in \([0-9]*\) of \([0-9]*\) steps.*/\1 of \2/p' "$dir/log")
  local median="-"
  if [ -s "$dir/steps.txt" ]; then
    median=$(grep -v '^#' "$dir/steps.txt" | tail -100 | awk '{print $2}' | sort -g | awk '{a[NR]=$1} END {printf "%.1f", (a[int((NR+1)/2)]+a[int(NR/2)+1])/2}')
  fi
  local opts=$(echo "$extra" | sed 's/^ *//' | tr '\n' ' ')
  printf "| %s | %s | %s | %s | %s | %s | %s |\n" "$label" "$(basename "$(dirname "$(dirname "$bin")")")" "${opts:-defaults}" "$rss" "${first:--}" "$median" "${waited:--}"
  rm -rf "$dir/out"
}

run "400 frames" "$MLIP" "$WORK/f400" 600
run "10,000 frames" "$MLIP" "$WORK/f10000" 200
run "100,000 frames" "$MLIP" "$WORK/f100000" 200
run "100,000 frames" "$MLIP" "$WORK/f100000" 200 "  data_workers: 0"
run "5,000 systems of 3-30 atoms" "$MLIP" "$WORK/mol5000" 200
if [ -n "${MLIP_BENCH_BEFORE:-}" ]; then
  # The build before streaming holds every frame's environment in memory: 400 frames only (10,000
  # would need ~27 GB).
  run "400 frames" "$MLIP_BENCH_BEFORE" "$WORK/f400" 600
fi
