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

/// The same energy written as tensor operations (autograd differentiates it to any order), on any
/// device: the reference the fused operation is tested against and its fallback. `n_int` [K, 3]
/// float64: the integer vectors of the k-vectors (one of each ±n pair), as long_range_kvectors
/// gives them.
torch::Tensor reciprocal_energy_by_operations(const LongRangeSettings& settings, const torch::Tensor& n_int,
                                              const torch::Tensor& q, const torch::Tensor& pos,
                                              const torch::Tensor& cell);

}  // namespace mlip::models
