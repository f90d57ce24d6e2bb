#pragma once

#include <torch/script.h>

#include <cstdint>
#include <vector>

#include "models/se_e2_a/fused_embedding.h"
#include "models/se_e2_a/se_e2_a.h"
#include "models/se_e2_a/se_e2_a_evaluator.h"

namespace mlip::models {

/// se_e2_a's training computation on the dense tensors of SeAGenericPath::dense_with_types, with
/// the embedding nets run by the fused kernels (docs/fused_kernels.md "The training path"): the
/// same numbers as the module's energy_force_env, without autograd inside the embedding nets.
///
/// The nets' outputs G and dG/ds are leaves of the graph; the forces take dE/ds from them
/// explicitly (dE/ds = sum over the outputs of dE/dG dG/ds), so a force loss needs autograd's
/// double backward only through the contraction and the fitting nets; backward() then hands
/// d loss / dG and d loss / d(dG/ds) to fused_embedding_adjoint for the nets' parameters. Every
/// slot goes through its net (empty ones too), so the shapes depend on the batch size and the
/// atoms only: the form a CUDA graph captures. Chosen with MLIP_SE_E2_A_PATH=fused
/// (docs/training_path.md).
class SeAFusedPath {
 public:
  /// `module` from build_se_e2_a(config); its parameters are shared, on the module's device.
  SeAFusedPath(const SeAConfig& config, torch::jit::Module module);

  /// Energies [B] float64, atomic energies [B, N], forces [B, N, 3] and virials [B, 3, 3] from
  /// `dense` = rij [B, N, C, 4], drij [B, N, C, 4, 3], vec [B, N, C, 3], nlist [B, N, C] int64,
  /// atype [N] int64, then each type's atoms [n_t] int64 (SeAGenericPath::dense_with_types).
  /// With `training`, keeps what backward() needs.
  SeAEvaluator::Output forward(const std::vector<torch::Tensor>& dense, bool training);

  /// After forward(..., true): adds d loss / d parameter to every parameter's grad, given
  /// d loss / d energy [B], d loss / d forces [B, N, 3] and d loss / d virial [B, 3, 3]
  /// (undefined counts as zero).
  void backward(const torch::Tensor& grad_energy, const torch::Tensor& grad_forces, const torch::Tensor& grad_virial);

 private:
  /// One call of an embedding net in the last forward: its inputs and its outputs as leaves.
  struct NetCall {
    EmbeddingNetParameters parameters;  ///< the net's, shared with the module
    torch::Tensor inputs;               ///< [q] the s of each slot (no graph)
    torch::Tensor value;                ///< G, a leaf [.., M]
    torch::Tensor slope;                ///< dG/ds, a leaf of the same shape
  };
  /// G and dG/ds of `inputs` through net `net`, as leaves of shape `shape` + [M] (dG/ds a leaf
  /// that needs a gradient only with `training`), recorded in calls_ for backward().
  NetCall call_net(int64_t net, const torch::Tensor& inputs, std::vector<int64_t> shape, bool training);

  SeAConfig config_;
  torch::jit::Module module_;
  std::vector<NetCall> calls_;
  std::vector<torch::Tensor> fitting_parameters_;
  SeAEvaluator::Output last_;
};

}  // namespace mlip::models
