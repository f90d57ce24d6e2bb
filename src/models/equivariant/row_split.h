// A tensor's rows split into several outputs, as one autograd node whose backward is one
// concatenation (docs/equivariant.md "The training path").
#pragma once

#include <torch/script.h>

#include <vector>

namespace mlip::models {

/// x [n, R, f] with R = Σ rows[k]: output k is rows first_k .. first_k + rows[k] - 1 of every
/// atom, reshaped to [n, components[k], rows[k]·f / components[k]] and contiguous (the message
/// contraction's rows of one output irrep, its components by its paths' channels). The same
/// values as x.narrow(1, first_k, rows[k]).reshape(...), as one node whose backward is one
/// concatenation of the outputs' gradients (zeros for those that have none), instead of a
/// narrow, a reshape and a copy per output and a gradient of x's size per output summed. Any
/// order of derivatives (the split and the concatenation are each other's backward).
std::vector<torch::Tensor> split_rows(const torch::Tensor& x, const std::vector<int64_t>& rows,
                                      const std::vector<int64_t>& components);

/// Registers `torch.ops.mlip.split_rows(x, rows, components) -> Tensor[]` for TorchScript; idempotent.
void register_row_split();

}  // namespace mlip::models
