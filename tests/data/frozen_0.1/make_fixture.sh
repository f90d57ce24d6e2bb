#!/usr/bin/env bash
# Made the frozen models of this folder, once, with mlip 0.1.0 at commit 5f1dc93 (the main of
# 2026-11-27, before frozen models carried their inference settings; docs/deploy.md "Frozen
# models from earlier versions"). They are kept, not remade: every later mlip must load them,
# evaluate them as reference.json says and run them in LAMMPS (tests/test_frozen_compat.cpp,
# tests/lammps/check_frozen_compat.py). Small on purpose (tens of steps; a few hundred KB).
#
#   se64.pt   se_e2_a, float64, a net per type pair (type_one_side false), rcut 4 Å
#   se64c.pt  se64.pt compressed (mlip compress -s 0.05 -f 5)
#   eq32.pt   equivariant, float32, 2 layers, correlation 2, readout of every layer
#   reference.json  a water frame (examples/water/data/valid, frame 0) and each model's energy,
#                   forces and virial on it from the model's own TorchScript forward in plain
#                   PyTorch (reference.py), to 17 digits
#
# usage: make_fixture.sh <mlip> <work dir>     (run from anywhere; writes into this folder)
set -euo pipefail
MLIP="$(realpath "$1")"
WORK="$2"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
DATA="$ROOT/examples/water/data"
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
common() {  # <steps>
  cat <<YAML
learning_rate: {type: exp, decay_steps: 10, start_lr: 0.002, stop_lr: 1.0e-4}
loss: {type: ener, start_pref_e: 0.02, limit_pref_e: 1, start_pref_f: 1000, limit_pref_f: 1}
training:
  training_data: {systems: [$DATA/train], batch_size: 1}
  numb_steps: $1
  seed: 7
  disp_freq: $1
  save_freq: $1
YAML
}
{ cat <<YAML
model:
  type_map: [O, H]
  descriptor: {type: se_e2_a, sel: [20, 40], rcut: 4.0, rcut_smth: 0.5, neuron: [8, 16, 32], axis_neuron: 4,
               type_one_side: false, resnet_dt: false, precision: float64, seed: 3}
  fitting_net: {neuron: [32, 32], resnet_dt: true, precision: float64, seed: 4}
YAML
  common 40; } > se64.yaml
{ cat <<YAML
model:
  type: equivariant
  type_map: [O, H]
  r_max: 4.0
  num_features: 8
  l_max: 1
  num_layers: 2
  correlation: 2
  readout: every_layer
  radial_width: 16
  avg_num_neighbors: auto
  precision: float32
  seed: 5
YAML
  common 10; } > eq32.yaml
for m in se64 eq32; do
  "$MLIP" train "$m.yaml" -o "$m" > "$m.log"
  "$MLIP" freeze -c "$m" -o "$HERE/$m.pt"
done
"$MLIP" compress -i "$HERE/se64.pt" -o "$HERE/se64c.pt" -t se64.yaml -s 0.05 -f 5 > compress.log
"${PYTHON:-/usr/bin/python3}" "$HERE/reference.py" "$DATA/valid" "$ROOT/tools" "$HERE"
ls -l "$HERE"
