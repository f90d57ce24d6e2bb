// The equivariant model's gate nonlinearity as one autograd node with its first and second
// derivatives written out (docs/equivariant.md "The training path").
#pragma once

#include <torch/script.h>

#include <vector>

namespace mlip::models {

/// The gate of a layer's output, channels last:
///
///   g [n, 1, f·(1+Q)]   the even scalars' channels: f for the scalars, then f gates per gated irrep
///   gated[q] [n, 2l+1, f]  the Q gated irreps (l > 0), any number of components each
///
/// returns { s = silu(g[..., :f]) [n, 1, f],  v_q = gated[q] · σ(g[..., f(q+1) : f(q+2)]) [n, 2l+1, f] },
/// the gate broadcast over the components; silu(a) = a σ(a). The same values as the model's
/// TorchScript source (narrow, sigmoid, products), as one node instead of ~4 + 3Q operations,
/// and its backward as one node whose own backward is written out (silu″, σ″). A third
/// derivative (never asked by training) is an mlip::Error. Host float/double tensors run as
/// loops with the vectorised σ (models/kernels/fast_tanh.h); other devices as LibTorch
/// operations of the same formulas.
std::vector<torch::Tensor> gate(const torch::Tensor& g, const std::vector<torch::Tensor>& gated);

/// Registers `torch.ops.mlip.gate(g, gated) -> Tensor[]` for TorchScript; idempotent.
void register_gate();

}  // namespace mlip::models
