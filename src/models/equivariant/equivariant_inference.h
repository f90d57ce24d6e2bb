#pragma once

#include <torch/script.h>

#include "models/equivariant/equivariant.h"
#include "models/inference_registry.h"

namespace mlip::models {

/// The equivariant model's keys of a frozen model's settings record (docs/deploy.md "Inference
/// settings"): num_features, l_max, parity, num_layers, correlation, readout_every_layer,
/// num_bessels, polynomial_p, radial_width, radial_depth (EquivariantConfig's fields); r_max is
/// the generic `cutoff`, avg_num_neighbors the module's attribute.
SettingsRecord equivariant_record(const EquivariantConfig& config);

/// The hyperparameters of a frozen equivariant module from its record and its attribute
/// avg_num_neighbors.
EquivariantConfig equivariant_config(const SettingsRecord& record, const torch::jit::Module& module);

/// The equivariant model's inference entry (models/inference_registry.h): its own inference for
/// MD on the CPU (docs/equivariant.md "Inference in MD": the training path's energy function,
/// whose message contraction never forms the edges' messages, on the geometry of the MD rank's
/// graph, and the forces from one gradient by the pair vectors; with or without features
/// exchanged between ranks), and the record of models frozen by mlip 0.1.0.
InferenceEntry equivariant_inference_entry();

}  // namespace mlip::models
