// A linear map over the last axis with a constant factor, as one autograd node that
// differentiates itself (docs/equivariant.md "The training path").
#pragma once

#include <torch/script.h>

namespace mlip::models {

/// With the three operands
///
///   G [..., o]  the incoming gradient of the output   (slot 0)
///   X [..., i]  the input rows, any leading axes       (slot 1)
///   W [i, o]    the map                                (slot 2)
///
/// and a constant factor s, the scalar F(G, X, W) = s · Σ G[r, o] X[r, i] W[i, o] is linear in
/// each operand; the map's output Y = s · X W is ∂F/∂G, and every derivative of Y of any order
/// is again a partial ∂F/∂(slot) with some operands replaced by incoming gradients (∂F/∂X =
/// s · G Wᵀ, ∂F/∂W = s · Xᵀ G over all rows). `linear_partial` computes one such partial with
/// autograd: one node per partial in place of a matrix product's reshapes, product and scaling.
/// `operands[slot]` is ignored; the output has the shape of that slot's operand.
torch::Tensor linear_partial(int64_t slot, const std::vector<torch::Tensor>& operands, double factor);

/// Y = factor · x W: x [..., i] (any layout), w [i, o]; returns [..., o] in x's dtype.
torch::Tensor linear_map(const torch::Tensor& x, const torch::Tensor& w, double factor);

/// Registers `torch.ops.mlip.linear(x, w, factor)` for TorchScript; idempotent.
void register_linear_map();

}  // namespace mlip::models
