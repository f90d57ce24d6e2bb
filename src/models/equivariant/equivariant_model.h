#pragma once

#include <optional>

#include "models/equivariant/equivariant.h"
#include "models/registry.h"

namespace mlip::models {

/// The equivariant model's input (`model.type: equivariant`; docs/input.md, docs/equivariant.md).
struct EquivariantSettings : ModelSettings {
  /// Hyperparameters; `avg_num_neighbors` there is used only when given below.
  EquivariantConfig config;
  /// model.avg_num_neighbors; absent or "auto": the mean number of neighbours within r_max
  /// over the training frames.
  std::optional<double> avg_num_neighbors;
  /// model.seed; absent: training.seed, else 1 (plus ModelContext::seed_offset when the model
  /// is built).
  std::optional<uint64_t> seed;

  double cutoff() const override { return config.r_max; }
  int64_t message_layers() const override { return config.num_layers; }
};

/// The registry entry of the equivariant model (models/registry.h).
ModelEntry equivariant_entry();

}  // namespace mlip::models
