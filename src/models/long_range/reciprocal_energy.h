#pragma once

#include <torch/script.h>

#include "models/long_range/long_range.h"

namespace mlip::models {

/// E_long of one periodic frame by the k-vector sum (docs/long_range.md "The k-sum in training"),
/// as one fused host operation with its own derivatives: the number long_range_energy's per-atom
/// energies sum to, differentiable in the charges, the positions and the cell, and once more (a
/// training loss of forces and virials differentiates through the first derivatives).
///
///   q     [N]    float64 on the CPU: the charges, e (already shifted to the frame's total)
///   pos   [N, 3] float64 on the CPU: the positions, Å
///   cell  [3, 3] float64 on the CPU: rows the lattice vectors, Å (not singular)
///   returns a 0-dim float64 tensor, eV.
///
/// The first derivatives are ∂E/∂q (the potentials), ∂E/∂pos (minus the fixed-charge forces) and
/// ∂E/∂cell (from the fixed-charge virial). Their derivatives by q are fused as well; those by pos
/// and cell, which a training loss does not ask for, come from the same sum written as tensor
/// operations (exact, slower). Throws mlip::Error for tensors of another dtype, device or shape, a
/// singular cell, or a derivative of the third order.
torch::Tensor reciprocal_energy(const LongRangeSettings& settings, const torch::Tensor& q, const torch::Tensor& pos,
                                const torch::Tensor& cell);

/// The long-range term of a training batch of B periodic frames of N atoms, each frame's k-sum
/// fused as above (docs/long_range.md "The k-sum in training"), from the raw charges:
struct ReciprocalBatchTerms {
  torch::Tensor energy;   ///< [B] eV: E_long of each frame
  torch::Tensor charges;  ///< [B, N] e: the raw charges shifted equally to settings.total_charge
  torch::Tensor seeds;    ///< [B, N] eV/e: ∂E_long/∂q̃, by the raw charges (through the shift)
  torch::Tensor forces;   ///< [B, N, 3] eV/Å: -∂E_long/∂pos at fixed charges
  torch::Tensor virial;   ///< [B, 3, 3] eV: the fixed-charge virial -∂E_long/∂ε
};
/// Every output is float64 and differentiable (once) in `raw_charges`: a training loss of
/// energies, forces and virials, with the forces through the charges taken as Σ seeds·∂q̃/∂r,
/// differentiates through them to the weights. Positions and cells are data (not differentiated).
///   raw_charges [B, N], pos [B, N, 3], cell [B, 3, 3]: float64 on the CPU (e, Å, Å).
/// Throws mlip::Error for tensors of another dtype, device or shape, a singular cell, or a
/// derivative of the second order.
ReciprocalBatchTerms reciprocal_batch(const LongRangeSettings& settings, const torch::Tensor& raw_charges,
                                      const torch::Tensor& pos, const torch::Tensor& cell);

/// The same energy written as tensor operations (autograd differentiates it to any order), on any
/// device: the reference the fused operation is tested against and its fallback. `n_int` [K, 3]
/// float64: the integer vectors of the k-vectors (one of each ±n pair), as long_range_kvectors
/// gives them.
torch::Tensor reciprocal_energy_by_operations(const LongRangeSettings& settings, const torch::Tensor& n_int,
                                              const torch::Tensor& q, const torch::Tensor& pos,
                                              const torch::Tensor& cell);

}  // namespace mlip::models
