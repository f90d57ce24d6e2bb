#pragma once

#include <torch/script.h>

#include <cstdint>
#include <vector>

#include "models/kernels/layer_rule.h"
#include "models/se_e2_a/se_e2_a.h"

namespace mlip::models {

/// One embedding net of se_e2_a as tensors, all on one device and of one floating dtype (the
/// model's), shared with the module they come from (not copied).
struct EmbeddingNetParameters {
  std::vector<Layer> layers;             ///< the layer rule of each layer (kernels/layer_rule.h)
  std::vector<torch::Tensor> weights;    ///< per layer [in, out]
  std::vector<torch::Tensor> biases;     ///< per layer [out]
  std::vector<torch::Tensor> timesteps;  ///< per layer [out] (resnet_dt's idt), undefined when none

  /// Net `net` (0 <= net < embedding_net_count(config)) of a module made by build_se_e2_a(config).
  static EmbeddingNetParameters of_se_e2_a(const torch::jit::Module& module, const SeAConfig& config, int64_t net);
};

/// An embedding net's outputs for q inputs.
struct EmbeddingOutputs {
  torch::Tensor value;  ///< G [q, M], the net's dtype and device
  torch::Tensor slope;  ///< dG/ds [q, M]
};

/// G and dG/ds of the inputs s [q] (a 1-D tensor of any stride, e.g. a column of the
/// normalised rows) through `net`, every layer in one pass (docs/fused_kernels.md "The
/// embedding net"): on a CUDA device one kernel launch on the current stream; on the CPU its
/// host twin, the same per-neuron arithmetic (at::parallel_for over pairs). No autograd: the
/// outputs carry no graph. Throws mlip::Error when s and the parameters disagree in device or
/// dtype, when the layers do not chain, or on CUDA when this mlip was built without its CUDA
/// kernels (MLIP_CUDA_KERNELS=OFF).
EmbeddingOutputs fused_embedding(const torch::Tensor& s, const EmbeddingNetParameters& net);

/// d loss / d(inputs and parameters) of an embedding net, from fused_embedding_adjoint.
struct EmbeddingGradients {
  torch::Tensor inputs;                  ///< d loss / ds [q]
  std::vector<torch::Tensor> weights;    ///< per layer [in, out], as the net's weights
  std::vector<torch::Tensor> biases;     ///< per layer [out]
  std::vector<torch::Tensor> timesteps;  ///< per layer [out], undefined when the layer has no idt
};

/// The adjoint of fused_embedding (docs/fused_kernels.md "The adjoint"): given
/// d loss / dG and d loss / d(dG/ds) (grad_value, grad_slope [q, M], the net's dtype and device)
/// of the inputs s [q], the gradients of that loss with respect to s and to every parameter.
/// One kernel launch (on the CPU its host twin) runs the pairs forward again and back, keeping
/// each layer's input rows and d loss / d(pre-activations); the weights' gradients are then a
/// matrix product per layer, the biases' and timesteps' sums over pairs. Throws mlip::Error as
/// fused_embedding does, and when the gradients' shape is not [q, M].
EmbeddingGradients fused_embedding_adjoint(const torch::Tensor& s, const EmbeddingNetParameters& net,
                                           const torch::Tensor& grad_value, const torch::Tensor& grad_slope);

/// Whether this build compiled its CUDA kernels (MLIP_CUDA_KERNELS).
bool fused_kernels_compiled();

}  // namespace mlip::models
