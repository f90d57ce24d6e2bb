#pragma once

#include <torch/script.h>

#include <memory>

#include "models/inference.h"
#include "models/model.h"

namespace mlip::models {

/// The equivariant model's own inference for MD on the CPU (docs/equivariant.md "Inference in
/// MD"): the training path's energy function (its message contraction, which never forms the
/// edges' messages) on the geometry of the MD rank's graph, and the forces from one gradient by
/// the pair vectors. `settings` are the equivariant model's (a frozen model's config read back),
/// `module` the frozen module (parameters, statistics, edge_geometry).
std::unique_ptr<Inference> make_equivariant_inference(const ModelSettings& settings, torch::jit::Module& module);

}  // namespace mlip::models
