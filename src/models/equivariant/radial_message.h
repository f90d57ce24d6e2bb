// The radial MLP and the message contraction of one interaction block as one pass over blocks of
// edges, for MD inference (docs/equivariant.md "Inference in MD": the fused edge pass).
#pragma once

#include <torch/script.h>

#include <optional>
#include <vector>

#include "models/equivariant/message_contraction.h"

namespace mlip::models {

/// The messages A [N, S, f] of one block, equal to
///
///   contract(0, {-, x, radial_mlp(basis, hidden, output, ...).reshape(Q, P, f), y}, tables)
///
/// (message_contraction.h, radial_mlp.h), with the MLP run once a pair, per block of 64 pairs,
/// into the pairs' radial weights W [Q, P·f], which the messages read through each edge's pair
/// and which are dropped once the messages are made (no hidden activations are kept). The
/// backward pass (by basis, x and y; first derivatives only) runs the MLP again per block of
/// pairs, sums the radial gradient over each pair's edges and takes it back to the pair's basis
/// row; then it forms the partials by x and y over the edges by neighbour (kKeptWeightBytes).
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

/// The backward pass keeps each pair's radial weights W [Q, P·f] between its two passes (over
/// pairs, then over edges by neighbour) in float32 when they take at most this many bytes a pair
/// (P·f <= 128: about 10 KB per atom at water's 20 pairs an atom), and otherwise (float64, or
/// wider weights) runs the MLP again per block of edges in the second pass (docs/equivariant.md
/// "Inference in MD").
constexpr int64_t kKeptWeightBytes = 512;

/// For tests: keep (true) or recompute (false) the weights between the backward passes whatever
/// their size; std::nullopt restores the size rule above. Process-wide.
void radial_message_keep_weights(std::optional<bool> force);

/// Registers `torch.ops.mlip.radial_message(basis, hidden, output, hidden_divisors,
/// output_divisor, x, y, edges, terms, coefficients, sizes)` for TorchScript (edges: the seven
/// tables of message_contract, pair and pair_edge included); idempotent.
void register_radial_message();

}  // namespace mlip::models
