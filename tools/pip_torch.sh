# Sourced by tools/setup.sh --torch pip (and tools/gpu_check.sh's dry run): the LibTorch inside
# pip's PyTorch, in a virtual environment made once and reused.
#
# pip_torch_venv sets
#   PIP_TORCH_PYTHON   the environment's python (PyTorch, numpy, ASE: the Python-side tests)
#   PIP_TORCH_PREFIX   torch.utils.cmake_prefix_path (for CMAKE_PREFIX_PATH)
#   PIP_TORCH_TORCHRUN the environment's torchrun (PyTorch 2.x's rendezvous, as its LibTorch speaks)
#   CUDA_HOME          the CUDA toolkit (default /usr/local/cuda)
# MLIP_TORCH_VERSION (default 2.11.0, the version on the GPU machines) and MLIP_CACHE (default
# ~/.cache/mlip) choose the version and where the environment lives.

MLIP_TORCH_VERSION="${MLIP_TORCH_VERSION:-2.11.0}"
MLIP_CACHE="${MLIP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mlip}"

pip_torch_venv() {
  CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
  if [ ! -x "$CUDA_HOME/bin/nvcc" ]; then
    echo "setup.sh --torch pip: the CUDA toolkit is needed (LibTorch's CMake package looks it up), but" \
         "$CUDA_HOME/bin/nvcc does not exist (set CUDA_HOME to the toolkit's folder)" >&2
    return 1
  fi
  local venv="$MLIP_CACHE/torch-$MLIP_TORCH_VERSION"
  local stamp="$venv/.mlip-complete"
  if [ ! -f "$stamp" ]; then
    echo "[mlip setup] installing PyTorch $MLIP_TORCH_VERSION, numpy, ASE and matplotlib from pip into $venv (about 4.5 GB, once)"
    rm -rf "$venv"
    mkdir -p "$MLIP_CACHE"
    /usr/bin/python3 -m venv "$venv" || { echo "setup.sh: could not make a virtual environment at $venv" >&2; return 1; }
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "torch==$MLIP_TORCH_VERSION" numpy ase matplotlib \
      >"$MLIP_CACHE/pip-install.log" 2>&1 || {
      tail -30 "$MLIP_CACHE/pip-install.log" >&2
      echo "setup.sh: pip install torch==$MLIP_TORCH_VERSION failed (log: $MLIP_CACHE/pip-install.log)" >&2
      return 1; }
    touch "$stamp"
  fi
  PIP_TORCH_PYTHON="$venv/bin/python"
  PIP_TORCH_TORCHRUN="$venv/bin/torchrun"
  PIP_TORCH_PREFIX="$("$PIP_TORCH_PYTHON" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null)" || {
    echo "setup.sh: $PIP_TORCH_PYTHON cannot import torch (remove $venv to reinstall)" >&2; return 1; }
  export CUDA_HOME
}
