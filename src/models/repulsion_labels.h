#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/system.h"
#include "models/pair_repulsion.h"

namespace mlip::models {

/// The training side of model.pair_repulsion (docs/repulsion.md "In training"): the repulsion has
/// no parameters, so adding it to the model's prediction is subtracting it from the labels; the
/// network then learns the rest, and its statistics (energy shifts, scales) are of the rest.
class RepulsionLabels {
 public:
  RepulsionLabels(const PairRepulsionSettings& settings, const std::vector<std::string>& type_map);

  /// The repulsion's energy [1] eV, forces [natoms * 3] eV/Å and virial [9] eV (the models'
  /// convention, -sum d ⊗ dE/dd) of a frame of `system`, all in float64.
  struct Terms {
    double energy = 0;
    std::vector<double> forces;
    std::vector<double> virial;
  };
  Terms terms(const data::System& system, const data::Frame& frame) const;

  /// Subtracts terms() from the labels the frame has (energy, force, virial).
  void subtract(const data::System& system, data::Frame& frame) const;

 private:
  ZblRepulsion zbl_;
};

/// The labels' correction for these settings; nullptr when the repulsion is disabled.
std::shared_ptr<const RepulsionLabels> repulsion_labels(const PairRepulsionSettings& settings,
                                                        const std::vector<std::string>& type_map);

}  // namespace mlip::models
