#!/usr/bin/env bash
# ctest (docs/training.md "Reproducibility"): the same input and seed give bit-identical weights.
# Four float64 runs of the equivariant model, and two of se_e2_a, each in a fresh process (so
# with address-space randomisation, other heap contents): every tensor of the checkpoints (the
# module's weights and buffers, the coupling coefficients, the raw weights kept for --restart)
# equal bit for bit.
# usage: reproducible.sh <mlip> <examples/water/data>
set -euo pipefail
MLIP="$(readlink -f "$1")"
DATA="$(readlink -f "$2")"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
fail() { echo "FAIL: $*" >&2; exit 1; }
cat > equivariant.yaml <<YAML
model: {type: equivariant, type_map: [O, H], r_max: 4.0, num_features: 8, l_max: 2, num_layers: 2, precision: float64, seed: 1}
learning_rate: {start_lr: 0.005, stop_lr: 1.0e-4, decay_steps: 10}
training:
  training_data: {systems: [$DATA/train], batch_size: 1}
  numb_steps: 20
  seed: 10
  disp_freq: 10
  save_freq: 20
YAML
cat > se_e2_a.yaml <<YAML
model:
  type_map: [O, H]
  descriptor: {type: se_e2_a, sel: [46, 92], rcut_smth: 0.5, rcut: 6.0, neuron: [8, 16], axis_neuron: 4, seed: 1}
  fitting_net: {neuron: [16, 16], seed: 1}
learning_rate: {start_lr: 0.001, stop_lr: 1e-5, decay_steps: 10}
training:
  training_data: {systems: [$DATA/train], batch_size: 1}
  numb_steps: 20
  seed: 3
  disp_freq: 10
  save_freq: 20
YAML
# same_tensors <a.pt> <b.pt>: every stored tensor record and the raw weights equal byte for byte
# (the optimiser's state is keyed by addresses, and the checksum covers it, so those differ).
same_tensors() {
  "${MLIP_TEST_PYTHON:-/usr/bin/python3}" - "$1" "$2" <<'PY'
import sys, zipfile
a, b = (zipfile.ZipFile(p) for p in sys.argv[1:3])
def records(z):
    out = {}
    for name in z.namelist():
        short = name.split("/", 1)[1]
        if short.startswith("data/") or short == "extra/weights":
            out[short] = z.read(name)
    return out
ra, rb = records(a), records(b)
assert ra.keys() == rb.keys(), (sorted(ra), sorted(rb))
differ = [k for k in ra if ra[k] != rb[k]]
if differ:
    sys.exit(f"{len(differ)} of {len(ra)} tensor records differ: {differ[:5]}")
print(f"{len(ra)} tensor records identical")
PY
}
for model in equivariant se_e2_a; do
  runs=4
  [ "$model" = se_e2_a ] && runs=2
  for k in $(seq 1 $runs); do
    "$MLIP" train "$model.yaml" -o "$model-$k" > "$model-$k.out" 2>&1 || { cat "$model-$k.out"; fail "$model run $k"; }
  done
  for k in $(seq 2 $runs); do
    echo -n "$model run $k vs run 1: "
    same_tensors "$model-1/model.ckpt-20.pt" "$model-$k/model.ckpt-20.pt" || fail "$model: run $k differs from run 1"
    cmp -s "$model-1/lcurve.out" "$model-$k/lcurve.out" || fail "$model: lcurve.out of run $k differs"
  done
done
echo "ok: repeated runs give bit-identical weights"
