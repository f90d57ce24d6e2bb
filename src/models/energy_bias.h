#pragma once

#include <torch/script.h>

#include <iosfwd>
#include <vector>

#include "models/model.h"

namespace mlip::models {

/// The per-type energy bias of the statistics frames (docs/training.md "Energy bias"): the
/// minimum-norm least-squares solution b of sum_t count_t(frame) b_t = E(frame), through the
/// SVD pseudo-inverse (well defined when the type counts are rank deficient, as in water, where
/// O:H is always 1:2). Returns [ntypes] float64, eV per atom of each type, and prints it as
/// "<name> [...] eV" with the per-atom RMSE of the fit. Throws mlip::Error when a system has
/// no energy labels. reference: [ntypes] eV, the reference energies (model.e0s) to take instead
/// of the fit (the RMSE printed is then that of the frames' energies about them); empty: fit.
torch::Tensor energy_bias(const std::vector<StatisticsFrames>& frames, const std::vector<double>& reference,
                          int ntypes, const char* name, std::ostream& log);

}  // namespace mlip::models
