#!/bin/sh
# Makes the water example's data from scratch: two boxes of 32 water molecules, two GFN1-xTB
# NVT MD runs with CP2K (different seeds), converted to DeePMD npy systems:
#   examples/water/data/train  (seed 1: 190 frames)
#   examples/water/data/valid  (seed 2:  60 frames)
#
# usage: examples/water/reference/make_data.sh          (from anywhere)
# environment (all optional):
#   WORK=/tmp/cp2k_water   scratch folder for CP2K's files (kept: logs, trajectories)
#   DATA=<repo>/examples/water/data   where the npy systems go
#   CP2K=cp2k.psmp  NP=2   the CP2K binary and its MPI ranks (run with OMP_NUM_THREADS=1)
#   PYTHON=python3         a Python 3 with numpy (falls back to /usr/bin/python3)
# Needs Debian's cp2k package (2023.1): apt-get install --no-install-recommends cp2k
# Takes ~12-16 min on 2 cores (696 MD steps of 96 atoms, 1.0-1.6 s each; measured 16 min 21 s
# while another job shared the 2 cores).
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${WORK:-/tmp/cp2k_water}
DATA=${DATA:-$(cd "$HERE/.." && pwd)/data}
CP2K=${CP2K:-cp2k.psmp}
NP=${NP:-2}
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c "import numpy" 2>/dev/null; then PYTHON=/usr/bin/python3; fi
"$PYTHON" -c "import numpy" || { echo "make_data.sh: need a python3 with numpy (PYTHON=...)" >&2; exit 1; }
command -v "$CP2K" >/dev/null || { echo "make_data.sh: $CP2K not found (apt-get install cp2k)" >&2; exit 1; }
if [ "$(id -u)" = 0 ]; then  # OpenMPI refuses root unless told
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMP_NUM_THREADS=1

EVERY=2      # write every 2nd step: 1 fs between frames
SKIP_FS=50   # the lattice start heats up: drop the first 50 fs (steps 0..98)

mkdir -p "$WORK" "$DATA"
# name  seed  MD steps (0.5 fs): frames kept = (STEPS - 100) / EVERY + 1
for run in "train 1 478" "valid 2 218"; do
  set -- $run
  name=$1 seed=$2 steps=$3
  dir=$WORK/$name
  rm -rf "$dir" && mkdir -p "$dir"
  "$PYTHON" "$HERE/make_box.py" --molecules 32 --seed "$seed" --out "$dir/box" --xyz "$dir/box.xyz"
  cell=$(sed -n 2p "$dir/box.xyz" | awk '{print $3}')
  echo "$name: CP2K GFN1-xTB NVT MD, seed $seed, $steps steps, box $cell A ($dir/md.out)"
  start=$(date +%s)
  (cd "$dir" && mpirun -np "$NP" "$CP2K" -i "$HERE/water_xtb_md.inp" -o md.out \
      --set PROJECT=md --set XYZ=box.xyz --set CELL="$cell" \
      --set SEED="$seed" --set STEPS="$steps" --set EVERY="$EVERY")
  end=$(date +%s)
  echo "$name: MD took $((end - start)) s"
  if grep -q "SCF run NOT converged" "$dir/md.out"; then
    echo "make_data.sh: $name: some SCF did not converge (grep 'SCF run NOT converged' $dir/md.out)" >&2
    exit 1
  fi
  rm -rf "${DATA:?}/$name"
  "$PYTHON" "$HERE/cp2k_to_deepmd.py" --project "$dir/md" --out "$DATA/$name" --skip-fs "$SKIP_FS"
done
"$PYTHON" "$HERE/check_data.py" "$DATA/train" "$DATA/valid"
