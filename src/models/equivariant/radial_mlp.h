// The equivariant model's radial MLP for MD inference, keeping only its input for the backward
// pass (docs/equivariant.md "Inference in MD").
#pragma once

#include <torch/script.h>

#include <vector>

namespace mlip::models {

/// w = (silu(... silu(basis · hidden[0] / hidden_divisors[0]) ...) · output) / output_divisor,
/// the same operations as the model's source, as one autograd node that saves its inputs only
/// and recomputes the hidden activations in its backward pass (instead of keeping two
/// [pairs, width] tensors per hidden layer). basis: [Q, num_bessels]; hidden[k]: [fan_in, width];
/// output: [width, P·f]; returns [Q, P·f]. First derivatives only: a backward pass that asks
/// for a graph (a second derivative) is an mlip::Error.
torch::Tensor radial_mlp(const torch::Tensor& basis, const std::vector<torch::Tensor>& hidden,
                         const torch::Tensor& output, const std::vector<double>& hidden_divisors,
                         double output_divisor);

/// Registers `torch.ops.mlip.radial_mlp(basis, hidden, output, hidden_divisors, output_divisor)`
/// for TorchScript; idempotent.
void register_radial_mlp();

}  // namespace mlip::models
