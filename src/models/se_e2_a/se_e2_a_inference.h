#pragma once

#include <torch/script.h>

#include "models/inference_registry.h"
#include "models/se_e2_a/se_e2_a.h"

namespace mlip::models {

/// se_e2_a's keys of a frozen model's settings record (docs/deploy.md "Inference settings"):
/// rcut, rcut_smth, neuron, axis_neuron, type_one_side, resnet_dt, fitting_neuron,
/// fitting_resnet_dt (SeAConfig's fields of the same names). sel and isolated_energy_is_bias
/// are the module's own attributes and are read from it.
SettingsRecord se_e2_a_record(const SeAConfig& config);

/// The hyperparameters of a frozen se_e2_a module: `record`'s (with type_map and precision, the
/// generic keys) and the module's own `sel` and `isolated_energy_is_bias` (absent: false, as
/// models frozen before it existed subtract nothing).
SeAConfig se_e2_a_config(const SettingsRecord& record, const torch::jit::Module& module);

/// se_e2_a's inference entry (models/inference_registry.h): its own inference for MD on the
/// CPU, the hand-written evaluator (models/se_e2_a/se_e2_a_evaluator.h) on the packed environment of
/// the MD neighbour list, counting a compressed model's pairs beyond its tables; compression;
/// and the record of models frozen by mlip 0.1.0.
InferenceEntry se_e2_a_inference_entry();

}  // namespace mlip::models
