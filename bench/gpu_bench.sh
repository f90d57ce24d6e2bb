#!/usr/bin/env bash
# Training-step benchmark on a GPU (docs/gpu_check.md; run by tools/gpu_check.sh): ms per
# training step of the water example (examples/water/data: 190 training frames of 96 atoms),
# median over the steps after a warm-up, from `mlip train --step-times`, for
#   - se_e2_a (examples/water/quick.yaml's model) and the equivariant model
#     (examples/water/equivariant.yaml's), float32 and float64, per-rank batch 1, 4 and 16, on
#     --device (cuda by default);
#   - the CPU at batch 1 (--cpu-rows b1, the default with --device cuda; `all`: every batch;
#     `none`: no CPU rows);
#   - under torchrun, float32, per-rank batch 1 and 4 (--dist-batches): one rank with
#     --backend nccl, and two ranks sharing the one GPU with --backend nccl and with
#     --backend gloo (docs/device.md "Collectives");
#   - with --cuda-graphs "false true", each single-rank row and each two-rank Gloo row on the
#     device twice: the usual step and the step from static buffers captured as CUDA graphs
#     (training.cuda_graphs: true, docs/device.md "Static shapes"; the device column says
#     "(graphs)");
#   - with --se-paths "generic fused", each se_e2_a row on the device once per training path
#     (MLIP_SE_E2_A_PATH; fused: the embedding nets by mlip's CUDA kernels, docs/fused_kernels.md
#     "The training path"; the device column names the path);
#   - with --device-kernels "off on", each equivariant row on the device once without and once
#     with mlip's CUDA kernels for the message contraction (MLIP_DEVICE_KERNELS,
#     docs/fused_kernels.md "The message contraction"; the device column says which);
# with the peak GPU memory of each run (nvidia-smi's memory.used, polled every 100 ms, minus its
# value before the run; it includes the CUDA context of each process). Prints a markdown table
# (also written to --out).
#
# usage: bench/gpu_bench.sh [--build-dir DIR] [--device cuda|cpu] [--cpu-rows none|b1|all]
#          [--models se_e2_a,equivariant] [--precisions float32,float64] [--batches 1,4,16]
#          [--dist-batches 1,4] [--no-dist] [--cuda-graphs "false true"] [--se-paths "generic fused"]
#          [--device-kernels "off on"] [--steps N] [--quick] [--count-ops]
#          [--python PY] [--torchrun PATH]
#          [--run-timeout S] [--out FILE.md] [--logs DIR]
#   --steps N      timed steps per run (default 200), after a warm-up of the first epoch (every
#                  frame is made and moved to the device once) plus 20 steps
#   --quick        a smoke test: 6 timed steps after 2 (for --device cpu here)
#   --logs DIR     keep every run's input, log and step times there
#   --run-timeout  seconds allowed per run (default 180)
#   --count-ops    also count each step's LibTorch operator calls, autograd nodes and device reads
#                  (`mlip train --count-ops`; the notes give their medians): what a GPU step asks
#                  of the host; where the CPU runs a GPU's code (se_e2_a's device-generic path)
#                  the same there, so the CPU measures it (docs/device.md "What a step asks of the
#                  host"); counting slows each call a little, so take times from runs without it
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR=""
DEVICE=cuda
CPU_ROWS=""
MODELS=se_e2_a,equivariant
PRECISIONS=float32,float64
BATCHES=1,4,16
DIST_BATCHES=1,4
DIST=1
GRAPHS=false
SE_PATHS=""
DEVICE_KERNELS=""
STEPS=200
QUICK=0
PY=""
TORCHRUN=""
RUN_TIMEOUT=180
COUNT_OPS=0
OUTFILE=""
LOGS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD_DIR="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    --cpu-rows) CPU_ROWS="$2"; shift 2 ;;
    --models) MODELS="$2"; shift 2 ;;
    --precisions) PRECISIONS="$2"; shift 2 ;;
    --batches) BATCHES="$2"; shift 2 ;;
    --dist-batches) DIST_BATCHES="$2"; shift 2 ;;
    --no-dist) DIST=0; shift ;;
    --cuda-graphs) GRAPHS="$2"; shift 2 ;;
    --se-paths) SE_PATHS="$2"; shift 2 ;;
    --device-kernels) DEVICE_KERNELS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --python) PY="$2"; shift 2 ;;
    --torchrun) TORCHRUN="$2"; shift 2 ;;
    --run-timeout) RUN_TIMEOUT="$2"; shift 2 ;;
    --count-ops) COUNT_OPS=1; shift ;;
    --out) OUTFILE="$2"; shift 2 ;;
    --logs) LOGS="$2"; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "gpu_bench.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$DEVICE" in cuda|cuda:*|cpu) ;; *) echo "gpu_bench.sh: --device: expected cuda or cpu, got '$DEVICE'" >&2; exit 2 ;; esac
[ -n "$CPU_ROWS" ] || { [ "$DEVICE" = cpu ] && CPU_ROWS=none || CPU_ROWS=b1; }
case "$CPU_ROWS" in none|b1|all) ;; *) echo "gpu_bench.sh: --cpu-rows: expected none, b1 or all" >&2; exit 2 ;; esac
if [ -z "$BUILD_DIR" ]; then
  for d in "$ROOT/build-gpu" "$ROOT/build-cuda" "$ROOT/build"; do [ -x "$d/bin/mlip" ] && { BUILD_DIR="$d"; break; }; done
fi
MLIP="${BUILD_DIR:-$ROOT/build-gpu}/bin/mlip"
[ -x "$MLIP" ] || { echo "gpu_bench.sh: no mlip at $MLIP (build first, or --build-dir)" >&2; exit 1; }
if [ -z "$TORCHRUN" ] && [ "$DIST" = 1 ]; then
  # The torchrun beside the Python that has torch (PyTorch 2.x's, as LibTorch 2.x speaks).
  for c in ${PY:+"$(dirname "$PY")/torchrun"} "$(command -v torchrun || true)"; do
    [ -n "$c" ] && [ -x "$c" ] && { TORCHRUN="$c"; break; }
  done
  [ -n "$TORCHRUN" ] || { echo "gpu_bench.sh: no torchrun found (--torchrun PATH, or --no-dist)" >&2; exit 1; }
fi
if [ "$QUICK" = 1 ]; then STEPS=6; fi
DATA="$ROOT/examples/water/data"
FRAMES="$("${PY:-python3}" -c "import glob, numpy as np; print(sum(np.load(f, mmap_mode='r').shape[0] for f in glob.glob('$DATA/train/set.*/energy.npy')))" 2>/dev/null || echo 190)"
NCPU="$(nproc 2>/dev/null || echo 2)"
SMI="$(command -v nvidia-smi || true)"
[ -n "$SMI" ] || { [ -x /usr/local/nvidia/bin/nvidia-smi ] && SMI=/usr/local/nvidia/bin/nvidia-smi; }
WORK="$(mktemp -d)"
POLLER=""
cleanup() { [ -n "$POLLER" ] && kill "$POLLER" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
[ -n "$LOGS" ] && mkdir -p "$LOGS"

# make_input <model> <precision> <batch> <steps> <file>: the example's input with the data's
# absolute paths, the batch, precision and steps; validation and a checkpoint only at the ends.
make_input() {
  local src
  case "$1" in
    se_e2_a) src="$ROOT/examples/water/quick.yaml" ;;
    equivariant) src="$ROOT/examples/water/equivariant.yaml" ;;
    *) echo "gpu_bench.sh: unknown model '$1'" >&2; exit 2 ;;
  esac
  sed -e "s#\[data/train\]#[$DATA/train]#" -e "s#\[data/valid\]#[$DATA/valid]#" \
      -e "/training_data:/,/batch_size:/ s/batch_size: .*/batch_size: $3/" \
      -e "s/precision: float[0-9]*/precision: $2/" \
      -e "s/numb_steps: .*/numb_steps: $4/" -e "s/disp_freq: .*/disp_freq: $4/" \
      -e "s/save_freq: .*/save_freq: $4/" "$src" > "$5"
  grep -q "batch_size: $3" "$5" && grep -q "numb_steps: $4" "$5" || { echo "gpu_bench.sh: could not edit $src" >&2; exit 1; }
}

gpu_mem_used() { [ -n "$SMI" ] && "$SMI" --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -1 | tr -d ' ' || true; }

ROWS=()
add_row() { ROWS+=("$1"); echo "$1"; }

# run_case <model> <precision> <device> <ranks> <backend|-> <batch> [graphs: true|false] [se_e2_a path]
#          [device kernels: off|on]
run_case() {
  local model="$1" prec="$2" dev="$3" ranks="$4" backend="$5" batch="$6" graphs="${7:-false}" path="${8:-}"
  local kernels="${9:-}"
  local tag="${model}-${prec}-${dev//:/}-r${ranks}-${backend/#-/none}-b${batch}-g${graphs}${path:+-$path}"
  tag="$tag${kernels:+-kernels-$kernels}"
  local dir="$WORK/$tag"
  mkdir -p "$dir"
  local per_step=$(( batch * ranks ))
  local warm
  if [ "$QUICK" = 1 ]; then warm=2; else warm=$(( (FRAMES + per_step - 1) / per_step + 20 )); fi
  local n=$(( warm + STEPS ))
  make_input "$model" "$prec" "$batch" "$n" "$dir/input.yaml"
  [ "$graphs" = true ] && sed -i 's/^training:$/training:\n  cuda_graphs: true/' "$dir/input.yaml"
  local threads="$NCPU"
  [ "$ranks" -gt 1 ] && threads=$(( NCPU / ranks > 0 ? NCPU / ranks : 1 ))
  local base="" peak="n/a"
  if [ "$dev" != cpu ] && [ -n "$SMI" ]; then
    base="$(gpu_mem_used)"
    "$SMI" --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > "$dir/mem.csv" 2>/dev/null &
    POLLER=$!
  fi
  local cmd=("$MLIP" train "$dir/input.yaml" -o "$dir/run" --step-times "$dir/times" --device "$dev")
  [ "$COUNT_OPS" = 1 ] && cmd+=(--count-ops)
  if [ "$backend" != "-" ]; then
    local port=$(( 29500 + RANDOM % 2000 ))
    cmd=("$TORCHRUN" --nproc-per-node="$ranks" --master-port="$port" --no-python "${cmd[@]}"
         --distributed on --backend "$backend" --timeout 60)
  fi
  # Two NCCL ranks on one GPU: NCCL refuses ("Duplicate GPU detected") at its first collective;
  # a shorter limit in case it hangs instead.
  local limit="$RUN_TIMEOUT"
  [ "$backend" = nccl ] && [ "$ranks" -gt 1 ] && [ "$limit" -gt 90 ] && limit=90
  local t0 rc=0
  t0=$(date +%s.%N)
  [ -n "$path" ] && cmd=(env MLIP_SE_E2_A_PATH="$path" "${cmd[@]}")
  [ -n "$kernels" ] && cmd=(env MLIP_DEVICE_KERNELS="$kernels" "${cmd[@]}")
  OMP_NUM_THREADS="$threads" NCCL_DEBUG="${NCCL_DEBUG:-WARN}" timeout -k 10 "$limit" "${cmd[@]}" > "$dir/log" 2>&1 || rc=$?
  local wall
  wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
  if [ -n "$POLLER" ]; then
    kill "$POLLER" 2>/dev/null; wait "$POLLER" 2>/dev/null || true; POLLER=""
    local maxu
    maxu="$(sort -n "$dir/mem.csv" 2>/dev/null | tail -1 | tr -d ' ')"
    [ -n "$maxu" ] && [ -n "$base" ] && peak=$(( maxu - base ))
  fi
  local rk="$ranks x $batch"
  local be="$backend"
  if [ "$backend" = "-" ]; then be="(none)"; elif [ "$ranks" = 1 ]; then be="$backend (1 rank: no collective)"; fi
  local note=""
  if [ "$backend" != "-" ]; then
    note="$(grep -m1 -E '^ *backend:' "$dir/log" | sed 's/^ *backend: *//' || true)"
  fi
  local shown="$dev"
  [ "$graphs" = true ] && shown="$dev (graphs)"
  [ -n "$path" ] && shown="$shown ($path path)"
  [ -n "$kernels" ] && shown="$shown (device kernels $kernels)"
  local label="$model | $prec | $shown | $rk | $be"
  if [ "$rc" != 0 ] || [ ! -s "$dir/times" ]; then
    local why
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then why="timed out after ${limit} s"; else
      why="exit $rc: $(grep -m1 -iE 'error|duplicate|invalid|failed|what\(\)' "$dir/log" | cut -c1-160 | tr '|' '/' || true)"
    fi
    add_row "| $label | failed | | | | | ${peak} | $why |"
  else
    # Percentiles over the timed steps (after the warm-up), with plain awk and sort.
    awk -v w="$warm" '!/^#/ && $1 > w { print $2 }' "$dir/times" | sort -g > "$dir/sorted"
    local cnt; cnt=$(wc -l < "$dir/sorted")
    pick() { sed -n "${1}p" "$dir/sorted"; }
    local med p10 p90 fps start
    med="$(pick $(( cnt / 2 + 1 )))"; p10="$(pick $(( cnt / 10 + 1 )))"; p90="$(pick $(( cnt * 9 / 10 + 1 )))"
    fps=$(awk -v m="$med" -v f="$per_step" 'BEGIN { printf "%.0f", f * 1000 / m }')
    start="$(grep -m1 -oE 'first step done [0-9.]+ s' "$dir/log" | grep -oE '[0-9.]+' || echo '?')"
    local counts=""
    if [ "$COUNT_OPS" = 1 ]; then
      median_of() {
        awk -v w="$warm" -v c="$1" '!/^#/ && $1 > w { print $c }' "$dir/times" | sort -g | sed -n "$(( cnt / 2 + 1 ))p"
      }
      counts="operators/step $(median_of 4), autograd nodes $(median_of 5), device reads $(median_of 6); "
    fi
    add_row "$(printf '| %s | %.2f | %.2f-%.2f | %s | %s | %s | %s | %s%s |' "$label" "$med" "$p10" "$p90" "$fps" \
      "$cnt" "$start" "$peak" "${note:+backend: $note; }$counts" "threads/rank $threads, wall ${wall} s")"
  fi
  if [ -n "$LOGS" ]; then mkdir -p "$LOGS/$tag"; cp "$dir/input.yaml" "$dir/log" "$LOGS/$tag/"; [ -f "$dir/times" ] && cp "$dir/times" "$LOGS/$tag/"; fi
  rm -rf "$dir/run"
}

IFS=, read -ra model_list <<<"$MODELS"
IFS=, read -ra prec_list <<<"$PRECISIONS"
IFS=, read -ra batch_list <<<"$BATCHES"
IFS=, read -ra dist_batch_list <<<"$DIST_BATCHES"
for g in $GRAPHS; do
  case "$g" in
    true|false) ;;
    *) echo "gpu_bench.sh: --cuda-graphs: expected false and/or true, got '$g'" >&2; exit 2 ;;
  esac
done
for path in $SE_PATHS; do
  case "$path" in
    generic|fused|hand-written) ;;
    *) echo "gpu_bench.sh: --se-paths: expected generic, fused and/or hand-written, got '$path'" >&2; exit 2 ;;
  esac
done
for k in $DEVICE_KERNELS; do
  case "$k" in
    off|on) ;;
    *) echo "gpu_bench.sh: --device-kernels: expected off and/or on, got '$k'" >&2; exit 2 ;;
  esac
done
gpu_name=""
[ -n "$SMI" ] && gpu_name="$("$SMI" --query-gpu=name,memory.total,driver_version --format=csv,noheader -i 0 2>/dev/null | head -1 || true)"
HEADER="# mlip training-step benchmark (bench/gpu_bench.sh)

$(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname 2>/dev/null || cat /proc/sys/kernel/hostname): ${gpu_name:-no GPU seen by nvidia-smi}; $NCPU CPUs; $("$MLIP" --version 2>/dev/null | head -1); build $(dirname "$(dirname "$MLIP")")

Water example (examples/water/data: $FRAMES training frames of 96 atoms). ms per training step (forward, backward,
all-reduce, Adam: the \`--step-times\` column), median and 10th-90th percentile over the timed steps
(after a warm-up of one epoch plus 20 steps$([ "$QUICK" = 1 ] && echo '; --quick: 2 warm-up steps' || true)); frames/s = ranks x batch / median;
start = seconds from the start to the end of step 1 (data, statistics, model, device); peak GPU MiB =
nvidia-smi memory.used during the run minus before it (CUDA contexts included).
"
echo "$HEADER"
TABLE_HEAD="| model | precision | device | ranks x batch | backend | median ms/step | p10-p90 ms | frames/s | timed steps | start s | peak GPU MiB | notes |
|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---|"
echo "$TABLE_HEAD"
for model in "${model_list[@]}"; do
  for prec in "${prec_list[@]}"; do
    for b in "${batch_list[@]}"; do
      for g in $GRAPHS; do
        if [ "$model" = se_e2_a ] && [ -n "$SE_PATHS" ]; then
          for path in $SE_PATHS; do run_case "$model" "$prec" "$DEVICE" 1 - "$b" "$g" "$path"; done
        elif [ "$model" = equivariant ] && [ -n "$DEVICE_KERNELS" ]; then
          for k in $DEVICE_KERNELS; do run_case "$model" "$prec" "$DEVICE" 1 - "$b" "$g" "" "$k"; done
        else
          run_case "$model" "$prec" "$DEVICE" 1 - "$b" "$g"
        fi
      done
    done
  done
done
if [ "$DEVICE" != cpu ] && [ "$CPU_ROWS" != none ]; then
  for model in "${model_list[@]}"; do
    for prec in "${prec_list[@]}"; do
      if [ "$CPU_ROWS" = all ]; then cb=("${batch_list[@]}"); else cb=(1); fi
      for b in "${cb[@]}"; do run_case "$model" "$prec" cpu 1 - "$b"; done
    done
  done
fi
if [ "$DIST" = 1 ]; then
  dprec=float32
  for model in "${model_list[@]}"; do
    for b in "${dist_batch_list[@]}"; do
      if [ "$DEVICE" = cpu ]; then
        for g in $GRAPHS; do run_case "$model" "$dprec" cpu 2 gloo "$b" "$g"; done
        add_row "| $model | $dprec | cpu | 1-2 x $b | nccl | skipped | | | | | | NCCL needs --device cuda |"
      else
        run_case "$model" "$dprec" "$DEVICE" 1 nccl "$b"
        run_case "$model" "$dprec" "$DEVICE" 2 nccl "$b"
        # Two Gloo ranks with each --cuda-graphs value (the captured step: two graphs, the
        # all-reduce between them).
        for g in $GRAPHS; do run_case "$model" "$dprec" "$DEVICE" 2 gloo "$b" "$g"; done
      fi
    done
  done
fi
if [ -n "$OUTFILE" ]; then
  mkdir -p "$(dirname "$OUTFILE")"
  { echo "$HEADER"; echo "$TABLE_HEAD"; printf '%s\n' "${ROWS[@]}"; } > "$OUTFILE"
fi
