// The edges' radial basis and harmonics with their derivatives by the edge vector: the cached
// geometry of a training frame (docs/equivariant.md "The training path").
#pragma once

#include <torch/script.h>

#include <cstdint>

#include "models/equivariant/equivariant.h"

namespace mlip::models {

/// The geometry of E edges, in the dtype and on the device of their vectors d [E, 3] (Å).
struct EdgeGeometry {
  torch::Tensor basis;           ///< [E, num_bessels] the radial basis times the cutoff
  torch::Tensor basis_jacobian;  ///< [E, num_bessels, 3] d basis / d d, 1/Å
  torch::Tensor y;               ///< [E, (l_max+1)^2] the harmonics of d / |d|
  torch::Tensor y_jacobian;      ///< [E, (l_max+1)^2, 3] d y / d d, 1/Å
};

/// The geometry by the module's own `edge_geometry` (build_equivariant), its derivatives by
/// autograd (one forward and one backward pass over B + Y copies of the edges, copy k carrying
/// column k): any device; the reference of edge_geometry_direct.
EdgeGeometry edge_geometry_by_autograd(torch::jit::Module& module, const torch::Tensor& d, int64_t num_bessels,
                                       int64_t num_harmonics);

/// The same computed directly from the formulas of docs/equivariant.md "Pieces" (the Bessel
/// basis, the polynomial cutoff, the harmonics and their derivatives written out), in one pass
/// over the edges: host tensors, float32 or float64 (the arithmetic in that dtype), edges of any
/// length (zero basis and basis derivative from r_max on). Edges must have non-zero length.
EdgeGeometry edge_geometry_direct(const EquivariantConfig& config, const torch::Tensor& d);

}  // namespace mlip::models
