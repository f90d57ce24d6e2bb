#!/usr/bin/env bash
# Sets up everything mlip needs on a Debian 12 machine and builds it. Idempotent: packages
# already installed are skipped, an existing build folder is reconfigured and built
# incrementally.
#
# usage: tools/setup.sh [--torch debian|pip] [--build-dir DIR] [--build-type Release|Debug|RelWithDebInfo]
#                       [--no-install] [--jobs N] [--target NAME] [--quiet]
#
# --target NAME: build only that target and what it needs (tools/run_example.sh: mlip, without
#   the tests); default: everything.
# --torch debian (default): Debian's LibTorch 1.13 (CPU), built into build/.
# --torch pip: the LibTorch inside pip's PyTorch 2.11.0 (built for CUDA 13.0, as on the GPU
#   machines; it runs CPU tensors without a GPU), built into build-cuda/ with CUDA and NCCL.
#   PyTorch, numpy and ASE go into a virtual environment under $MLIP_CACHE (default
#   ~/.cache/mlip), made once and reused; the CUDA toolkit (nvcc) must be installed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR=""
TORCH="debian"
BUILD_TYPE="Release"
INSTALL=1
JOBS="$(nproc 2>/dev/null || echo 2)"
QUIET=0
TARGET=""

while [ $# -gt 0 ]; do
  case "$1" in
    --torch) TORCH="$2"; shift 2 ;;
    --build-dir) BUILD_DIR="$2"; shift 2 ;;
    --build-type) BUILD_TYPE="$2"; shift 2 ;;
    --no-install) INSTALL=0; shift ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --target) TARGET="$2"; shift 2 ;;
    --quiet) QUIET=1; shift ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$TORCH" in
  debian) BUILD_DIR="${BUILD_DIR:-$ROOT/build}" ;;
  pip) BUILD_DIR="${BUILD_DIR:-$ROOT/build-cuda}" ;;
  *) echo "setup.sh: --torch: expected debian or pip, got '$TORCH'" >&2; exit 2 ;;
esac

say() { echo "[mlip setup] $*"; }

# Debian packages (README.md "Two commands"): compilers and build tools, LibTorch with c10d, Kokkos,
# yaml-cpp, GoogleTest, OpenMPI, the real torchrun (python3-torch), a one-node Slurm, and
# OpenBLAS (Debian's LibTorch calls the system BLAS; the reference BLAS is ~15x slower), and the
# HDF5 C library for DeePMD's .hdf5 systems (docs/data.md "HDF5 systems"), and the LAMMPS library
# with its headers for pair_style mlip and `mlip lammps` (docs/lammps.md), and matplotlib for
# `mlip plot` (docs/training.md "Pictures"), and CLI11 (header-only) that reads the command line's
# options (src/app/command_line.h) and OpenSSL's libcrypto that computes the SHA-256 checksums of
# checkpoints and frozen models (src/archive/sha256.h; docs/robustness.md "Checksums"), and
# tcmalloc, the mlip executable's memory allocator (docs/architecture.md "Memory allocator").
PACKAGES=(
  build-essential cmake ccache pkg-config
  libtorch-dev libgloo-dev libyaml-cpp-dev
  libtrilinos-kokkos-dev googletest libgtest-dev
  libopenmpi-dev openmpi-bin
  python3 python3-numpy python3-torch python3-ase python3-matplotlib
  slurm-wlm munge
  libopenblas0-openmp
  libhdf5-dev
  liblammps-dev
  libcli11-dev libssl-dev
  libtcmalloc-minimal4
)
# The pip build's virtual environment is made with Debian's Python.
[ "$TORCH" = pip ] && PACKAGES+=(python3-venv)

if [ "$INSTALL" = 1 ]; then
  missing=()
  for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""
    if [ "$(id -u)" != 0 ]; then
      if command -v sudo >/dev/null; then SUDO="sudo"; else
        echo "setup.sh: need root (or sudo) to install: ${missing[*]}" >&2; exit 1
      fi
    fi
    say "installing ${#missing[@]} Debian package(s): ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q >/dev/null
    $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/mlip-apt.log 2>&1 || {
      tail -30 /tmp/mlip-apt.log >&2; echo "setup.sh: apt-get install failed (log: /tmp/mlip-apt.log)" >&2; exit 1; }
  else
    say "all ${#PACKAGES[@]} Debian packages present"
  fi
fi

CMAKE_ARGS=(-DCMAKE_BUILD_TYPE="$BUILD_TYPE")
if [ "$TORCH" = pip ]; then
  # shellcheck source=tools/pip_torch.sh
  source "$ROOT/tools/pip_torch.sh"
  pip_torch_venv  # sets PIP_TORCH_PYTHON, PIP_TORCH_PREFIX, PIP_TORCH_TORCHRUN
  CMAKE_ARGS+=(-DCMAKE_PREFIX_PATH="$PIP_TORCH_PREFIX" -DMLIP_ENABLE_CUDA=ON
               -DCUDAToolkit_ROOT="$CUDA_HOME" -DCMAKE_CUDA_COMPILER="$CUDA_HOME/bin/nvcc"
               -DMLIP_TEST_PYTHON="$PIP_TORCH_PYTHON" -DMLIP_TORCHRUN="$PIP_TORCH_TORCHRUN"
               -DMLIP_PEER_MLIP="$ROOT/build/bin/mlip" -DMLIP_PEER_PYTHON=/usr/bin/python3)
fi

mkdir -p "$BUILD_DIR"
say "configuring ($BUILD_TYPE, $TORCH LibTorch) in $BUILD_DIR"
cfg_log="$BUILD_DIR/configure.log"
if ! cmake -S "$ROOT" -B "$BUILD_DIR" "${CMAKE_ARGS[@]}" >"$cfg_log" 2>&1; then
  cat "$cfg_log" >&2; echo "setup.sh: CMake configuration failed" >&2; exit 1
fi
[ "$QUIET" = 1 ] || grep -E "^-- (mlip|  )" "$cfg_log" || true
TARGET_ARGS=()
[ -z "$TARGET" ] || TARGET_ARGS=(--target "$TARGET")
say "building ${TARGET:-everything} with $JOBS job(s)"
start=$(date +%s)
if [ "$QUIET" = 1 ]; then
  cmake --build "$BUILD_DIR" -j "$JOBS" "${TARGET_ARGS[@]}" >"$BUILD_DIR/build.log" 2>&1 || {
    tail -50 "$BUILD_DIR/build.log" >&2; echo "setup.sh: build failed (log: $BUILD_DIR/build.log)" >&2; exit 1; }
else
  cmake --build "$BUILD_DIR" -j "$JOBS" "${TARGET_ARGS[@]}"
fi
say "built in $(( $(date +%s) - start )) s: $BUILD_DIR/bin/mlip"
