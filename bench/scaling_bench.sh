#!/usr/bin/env bash
# Scaling benchmark (issue 4): the water example (examples/water, reference settings, float64),
# 1 rank x 1 thread against W ranks x 1 thread, per-rank batch 1, under a real launcher.
# Prints samples/s (ranks / median step time over steps 50..N, from rank 0's step times, which
# include the wait in the all-reduce), the speed-up over 1 rank, and the share of the step time
# spent in the gradient all-reduce (SimpleDDP; measured around the collective on rank 0); through
# shared memory also the part of that share spent waiting for the last rank to arrive (the rest
# is the transfer and the averaging).
#
# usage: bench/scaling_bench.sh [--steps N] [--ranks "2"] [--launcher torchrun|mpirun] [--build-dir DIR]
# (MLIP_SHM_ALLREDUCE=0 in the environment: Gloo's all-reduce over TCP instead of shared memory)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$ROOT/build"
STEPS=400
RANKS="2"
LAUNCHER=torchrun
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --ranks) RANKS="$2"; shift 2 ;;
    --launcher) LAUNCHER="$2"; shift 2 ;;
    --build-dir) BUILD_DIR="$2"; shift 2 ;;
    *) echo "scaling_bench.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
MLIP="$BUILD_DIR/bin/mlip"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
DATA="$ROOT/examples/water/data"
sed -e "s#systems: \[data/train\]#systems: [$DATA/train]#" -e "s#systems: \[data/valid\]#systems: [$DATA/valid]#" \
    -e "s/batch_size: auto/batch_size: 1/" -e "s/numb_steps: 1000000/numb_steps: $STEPS/" \
    -e "s/disp_freq: 100/disp_freq: $STEPS/" -e "s/save_freq: 1000/save_freq: $STEPS/" \
    "$ROOT/examples/water/input.yaml" > "$WORK/input.yaml"
median_ms() {  # median of rank 0's step times over steps 50..STEPS
  awk -v s="$STEPS" '!/^#/ && $1 >= 50 && $1 <= s { print $2 }' "$1" | sort -g > "$WORK/sorted"
  sed -n "$(( $(wc -l < "$WORK/sorted") / 2 + 1 ))p" "$WORK/sorted"
}
export OMP_NUM_THREADS=1
printf "# water example (%s atoms), se_e2_a reference settings, float64, per-rank batch 1, 1 thread per rank, %s steps, %s\n" \
  "$(wc -w < "$DATA/train/type.raw")" "$STEPS" "$LAUNCHER"
printf "# %-5s %12s %10s %9s %16s %14s\n" ranks ms/step samples/s speed-up allreduce_share of_it_waiting
"$MLIP" train "$WORK/input.yaml" -o "$WORK/r1" --step-times "$WORK/t1" > "$WORK/log1" 2>&1 || { cat "$WORK/log1"; exit 1; }
base=$(median_ms "$WORK/t1")
printf "  %-5s %12.1f %10.2f %9s %16s %14s\n" 1 "$base" "$(echo "1000 / $base" | bc -l)" "1.00" "-" "-"
for w in $RANKS; do
  case "$LAUNCHER" in
    torchrun) cmd=("$ROOT/tools/torchrun" --nproc-per-node="$w" --no-python) ;;
    mpirun) cmd=(mpirun --allow-run-as-root --oversubscribe -np "$w") ;;
    *) echo "--launcher: expected torchrun or mpirun, got '$LAUNCHER'" >&2; exit 2 ;;
  esac
  "${cmd[@]}" "$MLIP" train "$WORK/input.yaml" -o "$WORK/r$w" --step-times "$WORK/t$w" > "$WORK/log$w" 2>&1 ||
    { cat "$WORK/log$w"; exit 1; }
  ms=$(median_ms "$WORK/t$w")
  line=$(grep "% of the step time" "$WORK/log$w")
  share=$(grep -o "[0-9.]*% of the step time" <<< "$line" | cut -d' ' -f1)
  # "(A of B s; W s of it waiting ...)": W / B of the step time was waiting.
  waiting=$(sed -n 's/.*of \([0-9.]*\) s; \([0-9.]*\) s of it waiting.*/\2 \1/p' <<< "$line" |
            awk '{ if ($2 > 0) printf "%.1f%%", 100 * $1 / $2 }')
  printf "  %-5s %12.1f %10.2f %9.2f %16s %14s\n" "$w" "$ms" "$(echo "1000 * $w / $ms" | bc -l)" \
    "$(echo "$w * $base / $ms" | bc -l)" "$share" "${waiting:--}"
  printf "  #     %s\n" "$(grep -o "backend: .*" "$WORK/log$w" | head -1)"
done
