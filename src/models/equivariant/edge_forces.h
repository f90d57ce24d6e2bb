// The forces and virials of a batch from the energy's gradient by the cached edge geometry, as one
// autograd node (docs/equivariant.md "The training path").
#pragma once

#include <torch/script.h>

namespace mlip::models {

/// The batch's cached geometry (models/equivariant/equivariant_model.cpp): E edges, Q pairs.
struct EdgeGeometryTables {
  torch::Tensor basis_jacobian;  ///< [Q, B, 3] model dtype, d basis / d d of each pair's edge, 1/Å
  torch::Tensor y_jacobian;      ///< [E, Y, 3] model dtype, d harmonics / d d_e, 1/Å
  torch::Tensor pair_edge;       ///< [Q] int64, the edge whose vector gives the pair's basis
  torch::Tensor i, j;            ///< [E] int64, centre and neighbour atoms (of the batch: frame f's are f·N ..)
  torch::Tensor d;               ///< [E, 3] model dtype, the edge vectors d_e = r_j - r_i (+ shift), Å
  torch::Tensor edge_frame;      ///< [E] int64, the frame of each edge
  int64_t frames = 1;            ///< F
  int64_t atoms = 0;             ///< N, atoms per frame
};

/// From ∂E/∂basis [Q, B] and ∂E/∂y [E, Y] (model dtype): per edge ∂E/∂d_e = Σ_k ∂E/∂y[e,k] ·
/// y_jacobian[e,k] (+ Σ_k ∂E/∂basis[q,k] · basis_jacobian[q,k] on the pair's edge), then
/// forces [F, N, 3] (F_i += ∂E/∂d_e, F_j -= ∂E/∂d_e, eV/Å) and virials [F, 3, 3] (W = -Σ_e d_e ⊗
/// ∂E/∂d_e, eV). One node, differentiable once by both gradients (the force loss's gradient by
/// the parameters; a second derivative is an mlip::Error); host loops for float/double on the CPU,
/// LibTorch operations of the same sums elsewhere.
std::pair<torch::Tensor, torch::Tensor> edge_forces(const torch::Tensor& grad_basis, const torch::Tensor& grad_y,
                                                    const EdgeGeometryTables& tables);

}  // namespace mlip::models
