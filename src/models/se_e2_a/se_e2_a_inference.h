#pragma once

#include <torch/script.h>

#include <memory>

#include "models/inference.h"
#include "models/model.h"
#include "models/se_e2_a/se_e2_a.h"

namespace mlip::models {

/// se_e2_a's own inference for MD on the CPU: the hand-written training path's evaluation
/// (models/se_e2_a/se_e2_a_evaluator.h) on the packed environment of the MD neighbour list. `settings`
/// are se_e2_a's (a frozen model's config read back), `module` the frozen module (its `sel`).
std::unique_ptr<Inference> make_se_e2_a_inference(const ModelSettings& settings, torch::jit::Module& module);

/// The hyperparameters of a frozen se_e2_a module: its settings' (a frozen model's config read
/// back) with the module's own `sel` and `isolated_energy_is_bias`. Throws mlip::Error when the
/// settings are not se_e2_a's.
SeAConfig frozen_se_e2_a_config(const ModelSettings& settings, const torch::jit::Module& module);

}  // namespace mlip::models
