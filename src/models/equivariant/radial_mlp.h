// The equivariant model's radial MLP as one autograd node: for MD inference, keeping only its input
// for the backward pass (docs/equivariant.md "Inference in MD"), and for training, with trainable
// weights and its first and second derivatives written out (docs/equivariant.md "The training
// path").
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

/// The same MLP for training: differentiable by the basis and by every weight, twice (the force
/// loss's gradient by the weights), as two autograd nodes (the MLP, and its backward pass, whose
/// own backward is written out) instead of the dozen LibTorch operations of each layer and their
/// derivatives. The hidden activations are recomputed in each backward pass. A third derivative,
/// or a second one through the weights' gradient, is an mlip::Error (training asks for neither:
/// the forces' graph holds the basis's gradient only).
torch::Tensor radial_mlp_training(const torch::Tensor& basis, const std::vector<torch::Tensor>& hidden,
                                  const torch::Tensor& output, const std::vector<double>& hidden_divisors,
                                  double output_divisor);

/// Registers `torch.ops.mlip.radial_mlp(basis, hidden, output, hidden_divisors, output_divisor)`
/// and `torch.ops.mlip.radial_mlp_training(...)` (same arguments) for TorchScript; idempotent.
void register_radial_mlp();

}  // namespace mlip::models
