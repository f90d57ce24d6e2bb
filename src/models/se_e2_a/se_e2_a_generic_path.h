#pragma once

#include <torch/script.h>

#include <memory>
#include <vector>

#include "models/se_e2_a/se_e2_a.h"
#include "models/se_e2_a/se_e2_a_evaluator.h"

namespace mlip::models {

class SeAFusedPath;

/// se_e2_a's training computation made only of LibTorch tensor operations, so that it runs on
/// any device (docs/training_path.md "The device-generic path"): the packed real pairs are
/// scattered back into the dense environment matrix of the batch, the module's
/// `energy_force_env` gives energies, forces (the gradient of the energy with respect to the
/// rows, kept as a graph) and virials, and backward() is autograd's double backward through
/// that graph. Same interface and same numbers as SeAEvaluator (the hand-written CPU path);
/// tests/test_se_e2_a_generic_path.cpp checks both on the CPU.
class SeAGenericPath {
 public:
  /// `module` from build_se_e2_a(config); its parameters are shared, on the module's device.
  /// With `fused_kernels`, forward_dense() and backward() run the embedding nets with the fused
  /// kernels (SeAFusedPath, docs/fused_kernels.md "The training path") instead of the module's
  /// energy_force_env and autograd's double backward; the same numbers.
  SeAGenericPath(const SeAConfig& config, torch::jit::Module module, bool fused_kernels = false);
  ~SeAGenericPath();

  /// Energies [B] float64, forces [B, N, 3] and virials [B, 3, 3] of a batch whose tensors
  /// (rows, slots) live on the module's device. With `training`, keeps the graph that
  /// backward() differentiates (create_graph); without, keeps nothing. Reads nothing back from
  /// the device (forward_dense of dense_with_types).
  SeAEvaluator::Output forward(const PackedEnv& batch, const std::vector<int>& types, bool training = true);

  /// The batch as the dense tensors `energy_force_env` reads, on the module's device: rij [B, N,
  /// C, 4], drij [B, N, C, 4, 3], vec [B, N, C, 3] (model dtype; empty slots zero), nlist [B, N,
  /// C] int64 (-1: empty), atype [N] int64 (C = the slots of sel). Their shapes depend on B and
  /// N only: the static shapes of a captured step (docs/device.md "Static shapes").
  std::vector<torch::Tensor> dense(const PackedEnv& batch, const std::vector<int>& types);
  /// The batch as dense() gives it, then each type's atoms [n_t] int64 (one tensor per type of
  /// the type map, on the module's device): the inputs of the step from static buffers, for
  /// which the module evaluates every slot and finds nothing from the data's values.
  std::vector<torch::Tensor> dense_with_types(const PackedEnv& batch, const std::vector<int>& types);
  /// forward() from dense()'s or dense_with_types()'s tensors (or copies of them): no tensor made
  /// from host data; with the types' atoms, nothing read back to the host either.
  SeAEvaluator::Output forward_dense(const std::vector<torch::Tensor>& dense, bool training = true);

  /// With model.long_range (docs/long_range.md "Training"): forward() with the electrostatic
  /// energy of the charges the fitting nets read out. pos [B, N, 3] and cell [B, 3, 3] float64 on
  /// the module's device (a cell read only where `periodic` [B] says so), the charges shifted to
  /// `settings.total_charge` (e) in each frame. The energy's gradient by the rows (through the charges too)
  /// gives the pairs' forces and virial as without the term; its direct gradient by the positions
  /// and the cell is added after (long_range_direct_forces). Never the fused kernels.
  SeAEvaluator::Output forward_long_range(const PackedEnv& batch, const std::vector<int>& types,
                                          const torch::Tensor& pos, const torch::Tensor& cell,
                                          const std::vector<bool>& periodic, const LongRangeSettings& settings,
                                          bool training = true);

  /// After forward(..., true): adds d loss / d parameter to every parameter's grad, given
  /// d loss / d energy [B], d loss / d forces [B, N, 3] and d loss / d virial [B, 3, 3] (any
  /// floating dtype; undefined counts as zero).
  /// grad_charges: d loss / d charges [B, N] of forward_long_range's charges (undefined: zero).
  void backward(const torch::Tensor& grad_energy, const torch::Tensor& grad_forces, const torch::Tensor& grad_virial,
                const torch::Tensor& grad_charges = {});

 private:
  SeAConfig config_;
  torch::jit::Module module_;
  torch::Tensor atype_;  // [N] int64 on the device, for types_
  std::vector<int> types_;
  SeAEvaluator::Output last_;              // the outputs of the last training forward, with their graph
  std::unique_ptr<SeAFusedPath> fused_;    // with fused_kernels
  std::vector<torch::Tensor> type_atoms_;  // each type's atoms [n_t] on the device, for types_
};

}  // namespace mlip::models
