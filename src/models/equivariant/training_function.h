// The equivariant model's energy from cached geometry (docs/equivariant.md "The training path"),
// shared by training (equivariant_model.cpp) and MD inference (equivariant_inference.cpp).
#pragma once

#include <torch/script.h>

#include <memory>
#include <utility>
#include <vector>

#include "models/equivariant/equivariant.h"

namespace mlip::models {

/// equivariant_training_source() compiled, with the operator it calls registered, and the
/// blocks' couplings it takes among its parameters.
class TrainingFunction {
 public:
  /// inference: the MD variant (equivariant_training_source(config, true)).
  explicit TrainingFunction(const EquivariantConfig& config, bool inference = false);

  /// training_energy's `params` for `module` (built by build_equivariant): its parameters,
  /// buffers, scale and shift by name, and the couplings. detach: the parameters without their
  /// autograd identity (MD differentiates by the geometry only).
  c10::Dict<std::string, torch::Tensor> parameters(const torch::jit::Module& module, bool detach) const;

  /// Atomic energies [N] in the model's dtype (scale and shift applied) of N atoms of types
  /// `atype` [N] int64, from the radial basis of the distinct pairs `basis` [Q, num_bessels],
  /// `pair` [E] int64 (the pair of edge e), the edge harmonics `y` [E, (l_max+1)^2], the edges'
  /// centres `i` [E] (non-decreasing) and neighbours `j` [E], and `edges` (edge_tables()).
  /// Differentiable by basis, y and the parameters.
  torch::Tensor energy(const c10::Dict<std::string, torch::Tensor>& params, double avg_num_neighbors,
                       const torch::Tensor& basis, const torch::Tensor& pair, const torch::Tensor& y,
                       const torch::Tensor& i, const torch::Tensor& j, const torch::Tensor& atype,
                       const std::vector<torch::Tensor>& edges) const;

  /// Block k of the MD variant on its own (equivariant_layer_source(); the inference variant
  /// only): the owned atoms' energy part e_k [nlocal] and output features (one [nlocal, 2l+1, f]
  /// tensor per irrep; none after the last block) from the input features `x` of all nodes.
  std::pair<torch::Tensor, std::vector<torch::Tensor>> layer(int64_t k, const c10::Dict<std::string, torch::Tensor>& params,
                                                             double avg_num_neighbors, const torch::Tensor& basis,
                                                             const torch::Tensor& pair, const torch::Tensor& y,
                                                             const torch::Tensor& atype,
                                                             const std::vector<torch::Tensor>& edges, int64_t nlocal,
                                                             const std::vector<torch::Tensor>& x) const;

  /// Moves the couplings to `device`: the device-generic kernels read them there, and a step
  /// captured as a CUDA graph may not copy from the host (docs/device.md "Static shapes").
  void to(torch::Device device);

  /// The message contraction's edge tables of edges (i, j) over `natoms` atoms, i non-decreasing:
  /// {i, j, centre_offsets [N+1], by_neighbor [E], neighbor_offsets [N+1]}
  /// (models/equivariant/message_contraction.h), on i's device.
  static std::vector<torch::Tensor> edge_tables(const torch::Tensor& i, const torch::Tensor& j, int64_t natoms);

 private:
  std::shared_ptr<torch::jit::CompilationUnit> unit_;
  std::vector<BlockCoupling> couplings_;
  std::vector<ProductTables> products_;
};

}  // namespace mlip::models
