#!/usr/bin/env bash
# CPU speed of the two LibTorch builds in one run (docs/device.md "Two LibTorch builds, one
# source"; bench/README.md "The two LibTorch builds on the CPU"): the default build (Debian's
# LibTorch 1.13, OpenBLAS) and the pip build (pip's PyTorch 2.11.0 for CUDA 13, MKL), on the same
# machine, interleaved (this VM's speed shifts by up to 1.5x):
#   - se_e2_a's training step (bench/train_step_bench.sh: DFT water, 192 atoms, batch 1,
#     float64 and float32), each build --rounds times, alternating;
#   - the equivariant model's training step (bench/equivariant_step_bench.sh, float64 and
#     float32, --seconds each, the two binaries alternating inside);
#   - the MD step in LAMMPS at 1,536 atoms (bench/md_bench.sh: both models, float64 and
#     float32, 1 rank x 2 threads), each build.
#
# usage: bench/builds_bench.sh [--default DIR] [--pip DIR] [--rounds N] [--steps N] [--seconds S]
#                              [--skip train|equivariant|md ...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEFAULT="$ROOT/build"
PIP="$ROOT/build-cuda"
ROUNDS=2
STEPS=400
SECS=60
SKIP=""
while [ $# -gt 0 ]; do
  case "$1" in
    --default) DEFAULT="$2"; shift 2 ;;
    --pip) PIP="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --seconds) SECS="$2"; shift 2 ;;
    --skip) SKIP="$SKIP $2"; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "builds_bench.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for dir in "$DEFAULT" "$PIP"; do
  [ -x "$dir/bin/mlip" ] || { echo "builds_bench.sh: no $dir/bin/mlip (bash tools/run_tests.sh builds both)" >&2; exit 1; }
done
echo "# $(date -u '+%Y-%m-%d %H:%M') UTC, $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
echo "# default: $("$DEFAULT/bin/mlip" --version)"
echo "# pip:     $("$PIP/bin/mlip" --version)"
skipped() { case " $SKIP " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

if ! skipped train; then
  for round in $(seq "$ROUNDS"); do
    for dir in "$DEFAULT" "$PIP"; do
      echo "## se_e2_a training step, round $round: $("$dir/bin/mlip" --version)"
      bash "$ROOT/bench/train_step_bench.sh" --build-dir "$dir" --steps "$STEPS"
    done
  done
fi
if ! skipped equivariant; then
  echo "## equivariant training step (the two binaries alternate)"
  bash "$ROOT/bench/equivariant_step_bench.sh" --seconds "$SECS" --cases "f64 f32" "$DEFAULT/bin/mlip" "$PIP/bin/mlip"
fi
if ! skipped md; then
  for dir in "$DEFAULT" "$PIP"; do
    echo "## MD in LAMMPS, 1,536 atoms: $("$dir/bin/mlip" --version)"
    bash "$ROOT/bench/md_bench.sh" --mlip "$dir/bin/mlip" --sizes 1536 --layouts 1x2 --ase-sizes ""
  done
fi
