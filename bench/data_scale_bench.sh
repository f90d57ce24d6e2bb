#!/bin/bash
# Training on sets larger than memory (docs/data.md): peak memory, start-up and step time as the
# set grows from 400 to 100,000 frames of 192 atoms, and for 5,000 small-molecule systems.
#
#   bash bench/data_scale_bench.sh            # all sets (needs ~1.2 GB of disk in $WORK)
#   MLIP_BENCH_BEFORE=/path/to/old/mlip bash bench/data_scale_bench.sh   # also an older build
#
# Model: the water example's reference se_e2_a (examples/water/quick.yaml: sel [46, 92],
# rcut 6 Å, float64), batch 1, the default cache budget (1,024 MB) and data_workers (auto: 0 on
# a CPU whose every core trains) unless a row says otherwise. Columns: peak resident memory (GNU time), start to step 1 (the wall time of the same
# input stopped after 1 step: process start, headers, statistics, model, one step, one
# checkpoint), median ms/step over the last 100 steps (--step-times), steps that waited for data
# (the trainer's "waited for data" line), and the mean time to make one frame (read it, the
# model's prepare_frame, labels; by the training thread as part of the step, or by a worker at
# low priority with data_workers: 1). The first row (cache_mb: all, 600 steps of 400 frames)
# finds every frame cached in its last 100 steps: the fully cached reference. The others run 200
# steps, each frame used once at most, so nothing is cached twice.
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
make_set f2000 frames 2000
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

printf "| set | build | options | peak memory (MB) | start to step 1 (s) | ms/step (median, last 100) | steps that waited | ms to make a frame |\n"
printf "|---|---|---|---:|---:|---:|---:|---:|\n"
run() {  # label build-name binary systems steps extra
  local label="$1" build="$2" bin="$3" systems="$4" steps="$5" extra="${6:-}"
  local dir="$WORK/run-$$-$RANDOM"
  mkdir -p "$dir"
  input "$systems" "$steps" "$extra" > "$dir/input.yaml"
  ( cd "$dir" && /usr/bin/time -f "%M" -o "$dir/rss" "$bin" train input.yaml -o out --step-times "$dir/steps.txt" \
      > "$dir/log" 2>&1 ) || { echo "| $label | $build | failed: $(tail -1 "$dir/log") |"; return; }
  local rss=$(( $(tail -1 "$dir/rss") / 1024 ))
  # Start to step 1: the wall time of the same run stopped after one step (process start,
  # reading the data, statistics, model, one step, one checkpoint); works for any build.
  input "$systems" 1 "$extra" > "$dir/one.yaml"
  ( cd "$dir" && /usr/bin/time -f "%e" -o "$dir/wall1" "$bin" train one.yaml -o one > "$dir/log1" 2>&1 ) || true
  local first=$(tail -1 "$dir/wall1")
  local waited=$(sed -n 's/^waited for data in \([0-9]*\) of \([0-9]*\) steps.*/\1 of \2/p' "$dir/log")
  local make=$(sed -n 's/^waited for data.* frames made, \([0-9.]*\) ms each.*/\1/p' "$dir/log")
  local median="-"
  if [ -s "$dir/steps.txt" ]; then
    median=$(grep -v '^#' "$dir/steps.txt" | tail -100 | awk '{print $2}' | sort -g | awk '{a[NR]=$1} END {printf "%.1f", (a[int((NR+1)/2)]+a[int(NR/2)+1])/2}')
  fi
  local opts=$(echo "$extra" | sed 's/^ *//' | tr '\n' ' ')
  printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n" "$label" "$build" "${opts:-defaults}" "$rss" "${first:--}" "$median" \
    "${waited:--}" "${make:--}"
  rm -rf "$dir"
}

BUILD="${MLIP_BENCH_LABEL:-this build}"
run "400 frames" "$BUILD" "$MLIP" "$WORK/f400" 600 "  cache_mb: all"
run "400 frames" "$BUILD" "$MLIP" "$WORK/f400" 200
run "2,000 frames" "$BUILD" "$MLIP" "$WORK/f2000" 200
run "10,000 frames" "$BUILD" "$MLIP" "$WORK/f10000" 200
run "100,000 frames" "$BUILD" "$MLIP" "$WORK/f100000" 200
run "100,000 frames" "$BUILD" "$MLIP" "$WORK/f100000" 200 "  data_workers: 1"
run "5,000 systems of 3-30 atoms" "$BUILD" "$MLIP" "$WORK/mol5000" 200
if [ -n "${MLIP_BENCH_BEFORE:-}" ]; then
  # The build before streaming holds every frame's environment in memory: 400 frames only (10,000
  # would need ~27 GB).
  before="before (${MLIP_BENCH_BEFORE_LABEL:-MLIP_BENCH_BEFORE})"
  run "400 frames" "$before" "$MLIP_BENCH_BEFORE" "$WORK/f400" 600
  run "2,000 frames" "$before" "$MLIP_BENCH_BEFORE" "$WORK/f2000" 200
fi

# mlip test streams too: peak memory of testing 400 and 2,000 frames with the same model.
printf "\n| mlip test on | peak memory (MB) | wall (s) |\n|---|---:|---:|\n"
tdir="$WORK/test-$$"
mkdir -p "$tdir"
input "$WORK/f400" 1 "" > "$tdir/input.yaml"
( cd "$tdir" && "$MLIP" train input.yaml -o model > /dev/null 2>&1 )
for set in f400 f2000; do
  ( cd "$tdir" && /usr/bin/time -f "%M %e" -o "$tdir/rss" "$MLIP" test -m model -s "$WORK/$set" > "$tdir/log" 2>&1 ) || {
    echo "| $set | failed: $(tail -1 "$tdir/log") |"; continue; }
  read -r kb wall < "$tdir/rss"
  printf "| %s frames | %d | %s |\n" "${set#f}" $((kb / 1024)) "$wall"
done
rm -rf "$tdir"
