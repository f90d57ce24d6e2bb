#pragma once

#include <torch/script.h>

#include <cstdint>

#include "models/model.h"

namespace mlip::train {

/// A batch's labels on the model's device, float64 (docs/training.md "Loss").
struct BatchLabels {
  torch::Tensor energy;   ///< [B] eV
  torch::Tensor forces;   ///< [B, N, 3] eV/Å; undefined: the system has no force labels
  torch::Tensor virial;   ///< [B, 9] eV; undefined: the system has no virial labels
  torch::Tensor weights;  ///< [B] each frame's weight in the loss (docs/training.md "Weights")
  /// [B, N] e, per-atom charges; undefined: the system has none, or the loss does not use them
  /// (docs/long_range.md "Charge labels").
  torch::Tensor charges;
};

/// The number of error sums of a batch (BatchLoss::sums).
constexpr int64_t kErrorSums = 5;

/// The loss of a batch and the error sums behind the displayed RMSEs.
struct BatchLoss {
  /// [] float64: docs/training.md "Loss" with the step's prefactors; differentiable with
  /// respect to the prediction.
  torch::Tensor loss;
  /// [kErrorSums] float64, detached: the loss times B, the sum of dE^2 / N^2, the sum of dF^2
  /// over components, the sum of mean_9(dW^2) / N^2, the sum of dq^2 over atoms.
  torch::Tensor sums;
};

/// The loss of `prediction` (energy [B] float64, forces [B, N, 3] and virial [B, 3, 3] in the
/// model's dtype, charges [B, N] float64) against `labels`, with the prefactors of energy,
/// forces, virial and charges, for frames of `natoms` atoms. The terms of labels that are
/// undefined are left out; charge labels with a prediction without charges are an mlip::Error.
BatchLoss batch_loss(const models::Prediction& prediction, const BatchLabels& labels, double prefactor_e,
                     double prefactor_f, double prefactor_v, double prefactor_q, int64_t natoms);
/// The same with the prefactors read from `prefactors` [3] float64 (energy, forces, virial) on
/// the labels' device, so that a step replayed as a CUDA graph reads each step's values
/// (train/static_step.h). Labels without charges only (a model with charges has no static steps).
BatchLoss batch_loss(const models::Prediction& prediction, const BatchLabels& labels, const torch::Tensor& prefactors,
                     int64_t natoms);

}  // namespace mlip::train
