# Shared helpers of the multi-rank ctest scripts (sourced). Every script: $1 = the mlip binary.
set -euo pipefail
MLIP="$(readlink -f "$1")"
DIST_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$DIST_DIR/../.." && pwd)"
PY="${MLIP_TEST_PYTHON:-/usr/bin/python3}"
TORCHRUN="${MLIP_TORCHRUN:-$ROOT/tools/torchrun}"
EXAMPLE="$ROOT/examples/water/data"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
# One thread per rank: the ranks share the machine's cores.
export OMP_NUM_THREADS=1
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)

fail() { echo "FAIL: $*" >&2; exit 1; }

# small_input <file> <per-rank batch> [extra training lines]: a small float64 se_e2_a on the
# example's data, 20 steps, lcurve every 5 steps, lr not scaled by the ranks.
small_input() {
  cat > "$1" <<YAML
model:
  type_map: [O, H]
  descriptor: {type: se_e2_a, sel: [46, 92], rcut_smth: 0.5, rcut: 6.0, neuron: [8, 16], axis_neuron: 4, seed: 1}
  fitting_net: {neuron: [16, 16], seed: 1}
learning_rate: {start_lr: 0.001, stop_lr: 1e-5, decay_steps: 10, scale_by_worker: none}
loss: {start_pref_e: 0.02, limit_pref_e: 1, start_pref_f: 1000, limit_pref_f: 1}
training:
  training_data: {systems: [$EXAMPLE/train], batch_size: $2}
  validation_data: {systems: [$EXAMPLE/valid], batch_size: 1, numb_btch: 2}
  numb_steps: 20
  seed: 3
  disp_freq: 5
  save_freq: 20
${3:-}
YAML
}

# same_lcurve <a> <b>: identical lcurve.out files.
same_lcurve() {
  diff "$1" "$2" > /dev/null || { diff "$1" "$2" >&2; fail "lcurve $1 and $2 differ"; }
  echo "ok: $1 == $2 ($(grep -vc '^#' "$1") lines)"
}

# same_weights <a.pt> <b.pt> [tol]: every parameter and statistic equal to a relative tol.
same_weights() {
  "$PY" "$DIST_DIR/compare_checkpoints.py" "$1" "$2" "${3:-1e-10}"
}
