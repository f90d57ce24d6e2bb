# Sourced by tests/python/test_frozen_python.sh and tests/builds/models_between_builds.sh: a
# small labelled periodic system and a tiny model's input, in the current folder.
#
# small_data <python>: data/train and data/valid (tests/python/make_periodic_system.py, numpy).
# small_input <se_e2_a|equivariant> <disp_freq> <save_freq>: input.yaml, 10 steps, every
#   checkpoint kept.
SMALL_RUN_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

small_data() {
  "$1" "$SMALL_RUN_DIR/make_periodic_system.py" data/train 1
  "$1" "$SMALL_RUN_DIR/make_periodic_system.py" data/valid 2
}

small_input() {
  local model
  if [ "$1" = equivariant ]; then
    model='model: {type: equivariant, type_map: [O, H], r_max: 4.0, num_features: 4, l_max: 2, num_layers: 3, seed: 2}'
  else
    model='model:
  type_map: [O, H]
  descriptor: {type: se_e2_a, sel: [16, 32], rcut: 4.0, rcut_smth: 1.0, neuron: [4, 8], axis_neuron: 4, seed: 2}
  fitting_net: {neuron: [8, 8], seed: 2}'
  fi
  cat > input.yaml <<YAML
$model
learning_rate: {start_lr: 0.005, stop_lr: 0.0005, decay_steps: 5}
loss: {start_pref_e: 0.02, limit_pref_e: 1, start_pref_f: 1000, limit_pref_f: 1}
training:
  training_data: {systems: [data/train], batch_size: 1}
  numb_steps: 10
  seed: 1
  disp_freq: $2
  save_freq: $3
  max_ckpt_keep: 10
YAML
}
