#!/usr/bin/env bash
# MD speed on a GPU without LAMMPS (bench/README.md "MD on a GPU"; run by tools/gpu_check.sh's md
# stage): bench_potential times md::Potential, what `pair_style mlip model.pt device D` computes
# per step on one rank, on the water example's 96-atom box replicated to 1,536 and 12,288 atoms,
# for se_e2_a (examples/water/quick.yaml's model) and the equivariant model
# (examples/water/equivariant.yaml's), float32 and float64, on --device (cuda) and on the CPU
# (all threads, the model's own inference), with the peak GPU memory of each run (nvidia-smi
# memory.used polled every 100 ms, minus its value before the run, the CUDA context included).
# The models are trained for 10 steps only: the speed does not depend on the weights.
#
# usage: bench/md_gpu_bench.sh [--build-dir DIR] [--device cuda|cpu] [--cpu-rows yes|no]
#          [--models se_e2_a,equivariant] [--precisions float32,float64] [--sizes 1536,12288]
#          [--pairs "auto host"] [--device-kernels "off on"] [--quick] [--run-timeout S] [--out FILE.md] [--logs DIR]
#   --quick   a smoke test: 1 timed step per row (for --device cpu here)
#   --pairs   where the device rows build their pairs (md::PairBuilding): auto (on the device for
#             cuda), host (the Kokkos list on the host), device; one row per value (default
#             "auto host"); the CPU rows use auto
#   --device-kernels "off on"   the equivariant rows on the device once per value of
#             MLIP_DEVICE_KERNELS (mlip's CUDA kernels for the message contraction and product
#             basis, docs/fused_kernels.md; the evaluation column says "device kernels on")
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR=""
DEVICE=cuda
CPU_ROWS=yes
MODELS=se_e2_a,equivariant
PRECISIONS=float32,float64
SIZES=1536,12288
QUICK=0
RUN_TIMEOUT=60
PAIRS="auto host"
DEVICE_KERNELS=""
OUTFILE=""
LOGS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD_DIR="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    --cpu-rows) CPU_ROWS="$2"; shift 2 ;;
    --models) MODELS="$2"; shift 2 ;;
    --precisions) PRECISIONS="$2"; shift 2 ;;
    --sizes) SIZES="$2"; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --run-timeout) RUN_TIMEOUT="$2"; shift 2 ;;
    --pairs) PAIRS="$2"; shift 2 ;;
    --device-kernels) DEVICE_KERNELS="$2"; shift 2 ;;
    --out) OUTFILE="$2"; shift 2 ;;
    --logs) LOGS="$2"; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "md_gpu_bench.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$DEVICE" in cuda|cuda:*|cpu) ;; *) echo "md_gpu_bench.sh: --device: expected cuda or cpu, got '$DEVICE'" >&2; exit 2 ;; esac
for k in $DEVICE_KERNELS; do
  case "$k" in
    off|on) ;;
    *) echo "md_gpu_bench.sh: --device-kernels: expected off and/or on, got '$k'" >&2; exit 2 ;;
  esac
done
case "$CPU_ROWS" in yes|no) ;; *) echo "md_gpu_bench.sh: --cpu-rows: expected yes or no, got '$CPU_ROWS'" >&2; exit 2 ;; esac
if [ -z "$BUILD_DIR" ]; then
  for d in "$ROOT/build-gpu" "$ROOT/build-cuda" "$ROOT/build"; do [ -x "$d/bin/bench_potential" ] && { BUILD_DIR="$d"; break; }; done
fi
MLIP="${BUILD_DIR:-$ROOT/build-gpu}/bin/mlip"
BENCH="${BUILD_DIR:-$ROOT/build-gpu}/bin/bench_potential"
for exe in "$MLIP" "$BENCH"; do
  [ -x "$exe" ] || { echo "md_gpu_bench.sh: no $exe (build first, or --build-dir)" >&2; exit 1; }
done
EX="$ROOT/examples/water"
NCPU="$(nproc 2>/dev/null || echo 2)"
SMI="$(command -v nvidia-smi || true)"
[ -n "$SMI" ] || { [ -x /usr/local/nvidia/bin/nvidia-smi ] && SMI=/usr/local/nvidia/bin/nvidia-smi; }
WORK="$(mktemp -d)"
POLLER=""
cleanup() { [ -n "$POLLER" ] && kill "$POLLER" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
[ -n "$LOGS" ] && mkdir -p "$LOGS"

replicas() {  # atoms -> nx ny nz (the 96-atom box repeated)
  case "$1" in
    96) echo "1 1 1" ;; 192) echo "2 1 1" ;; 768) echo "2 2 2" ;; 1536) echo "4 2 2" ;;
    12288) echo "8 4 4" ;; 98304) echo "16 8 8" ;;
    *) echo "md_gpu_bench.sh: no replication for $1 atoms (96, 192, 768, 1536, 12288, 98304)" >&2; exit 2 ;;
  esac
}
steps_for() {  # model atoms device -> timed steps (a few seconds each)
  [ "$QUICK" = 1 ] && { echo 1; return; }
  case "$1:$2:$3" in
    se_e2_a:1536:cpu) echo 20 ;; se_e2_a:*:cpu) echo 4 ;;
    equivariant:1536:cpu) echo 5 ;; equivariant:*:cpu) echo 2 ;;
    *:1536:*) echo 20 ;; *) echo 10 ;;
  esac
}
gpu_mem_used() { [ -n "$SMI" ] && "$SMI" --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -1 | tr -d ' ' || true; }

IFS=, read -ra model_list <<<"$MODELS"
IFS=, read -ra prec_list <<<"$PRECISIONS"
IFS=, read -ra size_list <<<"$SIZES"

# Models: 10 training steps each on the CPU, then frozen.
for model in "${model_list[@]}"; do
  for prec in "${prec_list[@]}"; do
    name="$model-$prec"
    input="$EX/quick.yaml"
    [ "$model" = equivariant ] && input="$EX/equivariant.yaml"
    sed -e "s/numb_steps: .*/numb_steps: 10/" -e "s/save_freq: .*/save_freq: 10/" -e "s/disp_freq: .*/disp_freq: 10/" \
        -e "s/precision: float[0-9]*/precision: $prec/" \
        -e "s#\[data/train\]#[$EX/data/train]#" -e "s#\[data/valid\]#[$EX/data/valid]#" "$input" > "$WORK/$name.yaml"
    if ! "$MLIP" train "$WORK/$name.yaml" -o "$WORK/$name" --device cpu > "$WORK/$name.train.log" 2>&1 ||
       ! "$MLIP" freeze -c "$WORK/$name" -o "$WORK/$name.pt" > "$WORK/$name.freeze.log" 2>&1; then
      echo "md_gpu_bench.sh: training or freezing $name failed:" >&2; tail -5 "$WORK/$name.train.log" "$WORK/$name.freeze.log" >&2 || true
      exit 1
    fi
  done
done

gpu_name=""
[ -n "$SMI" ] && gpu_name="$("$SMI" --query-gpu=name,memory.total,driver_version --format=csv,noheader -i 0 2>/dev/null | head -1 || true)"
HEADER="# mlip MD benchmark without LAMMPS (bench/md_gpu_bench.sh)

$(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname 2>/dev/null || cat /proc/sys/kernel/hostname): ${gpu_name:-no GPU seen by nvidia-smi}; $NCPU CPUs; $("$MLIP" --version 2>/dev/null | head -1)

md::Potential::compute per step (the pairs on the host or the device, see the evaluation column;
the model on the device; forces and virial back to the host), one rank owning the water box replicated to N atoms, ghosts to the
model's ghost cutoff + 1 Å, folded by id (as pair_style mlip on one rank). us/atom-step = time /
(steps x N), after 3 untimed steps; ms/step = time / steps, median and max of the steps; NL share = the neighbour list's part of the time; peak GPU MiB
= nvidia-smi memory.used during the run minus before it (the CUDA context included).
"
TABLE_HEAD="| model | precision | device | atoms | ghosts | timed steps | us/atom-step | ms/step | median ms | max ms | NL share | peak GPU MiB | evaluation |
|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
echo "$HEADER"
echo "$TABLE_HEAD"
ROWS=()
add_row() { ROWS+=("$1"); echo "$1"; }
devices=("$DEVICE")
[ "$DEVICE" != cpu ] && [ "$CPU_ROWS" = yes ] && devices+=(cpu)
for dev in "${devices[@]}"; do
  for model in "${model_list[@]}"; do
    for prec in "${prec_list[@]}"; do
      for atoms in "${size_list[@]}"; do
       pair_list=(auto)
       [ "$dev" != cpu ] && read -ra pair_list <<< "$PAIRS"
       kernel_list=("")
       if [ "$dev" != cpu ] && [ "$model" = equivariant ] && [ -n "$DEVICE_KERNELS" ]; then
         read -ra kernel_list <<< "$DEVICE_KERNELS"
       fi
       for pairs in "${pair_list[@]}"; do
        for kernels in "${kernel_list[@]}"; do
        read -r nx ny nz <<< "$(replicas "$atoms")"
        steps=$(steps_for "$model" "$atoms" "$dev")
        tag="$model-$prec-${dev//:/}-$atoms-$pairs${kernels:+-kernels-$kernels}"
        base="" peak=""
        if [ "$dev" != cpu ] && [ -n "$SMI" ]; then
          base="$(gpu_mem_used)"
          "$SMI" --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > "$WORK/$tag.mem" 2>/dev/null &
          POLLER=$!
        fi
        rc=0
        OMP_NUM_THREADS="$NCPU" MLIP_DEVICE_KERNELS="${kernels:-off}" timeout -k 10 "$RUN_TIMEOUT" "$BENCH" \
          "$WORK/$model-$prec.pt" "$dev" "$EX/data/valid" "$nx" "$ny" "$nz" "$steps" auto 3 "$pairs" > "$WORK/$tag.log" 2>&1 ||
          rc=$?
        if [ -n "$POLLER" ]; then
          kill "$POLLER" 2>/dev/null; wait "$POLLER" 2>/dev/null || true; POLLER=""
          maxu="$(sort -n "$WORK/$tag.mem" 2>/dev/null | tail -1 | tr -d ' ')"
          [ -n "$maxu" ] && [ -n "$base" ] && peak=$(( maxu - base ))
        fi
        [ -n "$LOGS" ] && cp "$WORK/$tag.log" "$LOGS/"
        line="$(grep '^atoms=' "$WORK/$tag.log" || true)"
        if [ "$rc" != 0 ] || [ -z "$line" ]; then
          why="exit $rc"; { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && why="over the ${RUN_TIMEOUT} s run limit"
          add_row "| $model | $prec | $dev | $atoms | | | failed: $why $(tail -1 "$WORK/$tag.log" | cut -c1-120 | tr '|' '/') | | | | | $peak | |"
          continue
        fi
        val() { sed -E "s/.*\\b$1=([^ ]+).*/\\1/" <<< "$line"; }
        desc="$(sed -E 's/.*describe="(.*)"$/\1/' <<< "$line")${kernels:+; device kernels $kernels}"
        add_row "$(printf '| %s | %s | %s | %s | %s | %s | %.3f | %.2f | %.2f | %.2f | %.2f | %s | %s |' "$model" "$prec" "$dev" "$atoms" \
          "$(val ghosts)" "$(val steps)" "$(val us_per_atom_step)" \
          "$(awk -v s="$(val seconds)" -v n="$(val steps)" 'BEGIN { print 1000 * s / n }')" \
          "$(val median_ms)" "$(val max_ms)" "$(val neighbor_list_share)" "${peak:-n/a}" "$desc")"
        done
       done
      done
    done
  done
done
if [ -n "$OUTFILE" ]; then
  mkdir -p "$(dirname "$OUTFILE")"
  { echo "$HEADER"; echo "$TABLE_HEAD"; printf '%s\n' "${ROWS[@]}"; } > "$OUTFILE"
fi
