// How a model's charge head meets the long-range term computed outside it, across MD ranks
// (docs/lammps.md "Long range across ranks"). Header only; no LibTorch, no LAMMPS.
#pragma once

#include <cstdint>

namespace mlip::models {

/// The long-range energy E_long of a model's charges (docs/long_range.md), computed by the MD
/// code over every rank's atoms. An inference that has charges (InferenceInputs::charges) hands
/// it the raw charges q̃ of its owned atoms once per evaluation, between its forward and backward
/// passes, and takes back ∂E_long/∂q̃ of each: the seed of the backward pass through the charge
/// head, which gives the forces through the charges' dependence on positions. Collective: every
/// rank calls couple() once per evaluation, in the same order.
class ChargeCoupling {
 public:
  virtual ~ChargeCoupling() = default;
  /// raw: [nlocal] e, the owned atoms' raw charges (before the shift to the total charge), float64.
  /// gradient: [nlocal] eV/e, filled with ∂E_long/∂q̃_i of each (the shift's dependence included).
  virtual void couple(const double* raw, int64_t nlocal, double* gradient) = 0;
};

}  // namespace mlip::models
