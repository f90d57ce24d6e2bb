// The radial MLP and the message contraction of one interaction block as one pass over blocks of
// edges, for MD inference (docs/equivariant.md "Inference in MD": the fused edge pass).
#pragma once

#include <torch/script.h>

#include <vector>

#include "models/equivariant/message_contraction.h"

namespace mlip::models {

/// The messages A [N, S, f] of one block, equal to
///
///   contract(0, {-, x, radial_mlp(basis, hidden, output, ...).reshape(Q, P, f), y}, tables)
///
/// (message_contraction.h, radial_mlp.h), with each edge's radial weights W[pair[e]] [P, f]
/// computed from its pair's basis row per block of edges, used, and dropped: no [Q, P·f] tensor
/// and no hidden activations are kept. The backward pass (by basis, x and y; first derivatives
/// only) runs over the edges by neighbour, recomputing each block's MLP, and keeps per edge only
/// the basis gradient [E, num_bessels] that it sums by pair at the end.
///
/// basis: [Q, num_bessels] the radial basis of each pair; hidden[k]: [fan_in, width];
/// output: [width, P·f]; x: [N, D, f] the block's linearly mixed input features; y: [E, H] the
/// edge harmonics; tables: the contraction's edge tables with `pair` and `pair_edge` set
/// (tables.pair[e] is edge e's row of basis). All tensors on one device and of one floating
/// dtype; the weights must not require a gradient (MD inference). On the CPU the fused kernels
/// run; elsewhere the same function is composed of radial_mlp() and contract().
torch::Tensor radial_message(const torch::Tensor& basis, const std::vector<torch::Tensor>& hidden,
                             const torch::Tensor& output, const std::vector<double>& hidden_divisors,
                             double output_divisor, const torch::Tensor& x, const torch::Tensor& y,
                             const ContractionTables& tables);

/// Registers `torch.ops.mlip.radial_message(basis, hidden, output, hidden_divisors,
/// output_divisor, x, y, edges, terms, coefficients, sizes)` for TorchScript (edges: the seven
/// tables of message_contract, pair and pair_edge included); idempotent.
void register_radial_message();

}  // namespace mlip::models
