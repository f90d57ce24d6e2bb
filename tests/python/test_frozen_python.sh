#!/usr/bin/env bash
# ctest: train a tiny model, freeze it, run `mlip test -d`, and check the frozen file from
# the test Python's PyTorch (tests/python/check_frozen.py; Debian's, or pip's in a build against pip's LibTorch).
# usage: test_frozen_python.sh <mlip> [se_e2_a|equivariant]
set -euo pipefail
MLIP="$1"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${MLIP_TEST_PYTHON:-/usr/bin/python3}"
"$PY" -c "import torch, ase, numpy" || { echo "$PY needs torch, ase and numpy (tools/setup.sh installs them)"; exit 1; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
"$PY" "$HERE/make_periodic_system.py" data/train 1
"$PY" "$HERE/make_periodic_system.py" data/valid 2
if [ "${2:-se_e2_a}" = equivariant ]; then
  MODEL='model: {type: equivariant, type_map: [O, H], r_max: 4.0, num_features: 4, l_max: 2, num_layers: 3, seed: 2}'
else
  MODEL='model:
  type_map: [O, H]
  descriptor: {type: se_e2_a, sel: [16, 32], rcut: 4.0, rcut_smth: 1.0, neuron: [4, 8], axis_neuron: 4, seed: 2}
  fitting_net: {neuron: [8, 8], seed: 2}'
fi
cat > input.yaml <<YAML
$MODEL
learning_rate: {start_lr: 0.005, stop_lr: 0.0005, decay_steps: 5}
loss: {start_pref_e: 0.02, limit_pref_e: 1, start_pref_f: 1000, limit_pref_f: 1}
training:
  training_data: {systems: [data/train], batch_size: 1}
  numb_steps: 10
  seed: 1
  disp_freq: 5
  save_freq: 10
YAML
"$MLIP" train input.yaml > train.log
"$MLIP" freeze -c . -o frozen.pt
"$MLIP" test -m frozen.pt -s data/valid -d detail > test.log
"$PY" "$HERE/check_frozen.py" frozen.pt data/valid detail "$HERE/../../tools"
