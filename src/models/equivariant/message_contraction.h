#pragma once

#include <torch/script.h>

#include <cstdint>
#include <vector>

namespace mlip::models {

/// The message step of one equivariant interaction block as one multilinear contraction
/// (docs/equivariant.md "The training path"). With the four operands
///
///   A [N, S, f]  messages per atom, output component s, channel  (slot 0)
///   X [N, D, f]  the atoms' input features, component d, channel  (slot 1)
///   W [E, P, f]  the radial weights of edge e, path p, channel     (slot 2)
///   Y [E, H]     the edge harmonics, all l <= l_max                (slot 3)
///
/// and the sparse coupling terms (m, d, s, p, c), the scalar
///
///   F(A, X, W, Y) = Σ_e Σ_terms Σ_f c · A[i_e, s, f] · X[j_e, d, f] · W[e, p, f] · Y[e, m]
///
/// is linear in each operand, and every derivative of every order of the messages
/// M = ∂F/∂A is again a partial ∂F/∂(slot) with some operands replaced by incoming gradients.
/// `contract` computes one such partial.
struct ContractionTables {
  torch::Tensor centre;            ///< [E] int64 i_e, non-decreasing
  torch::Tensor neighbor;          ///< [E] int64 j_e
  torch::Tensor centre_offsets;    ///< [N+1] int64: the edges of centre n are [offsets[n], offsets[n+1])
  torch::Tensor by_neighbor;       ///< [E] int64: edge ids ordered by neighbour (stable)
  torch::Tensor neighbor_offsets;  ///< [N+1] int64: by_neighbor[k] for k in [offsets[a], offsets[a+1]) have j = a
  /// [T, 4] int64 rows (m, d, s, p); every output component s belongs to one path p.
  torch::Tensor terms;
  torch::Tensor coefficients;      ///< [T] float64 c
  std::vector<int64_t> sizes;      ///< {H, D, S, P}
  /// Optional: radial weights by pair. pair [E] int64: W's row of edge e is pair[e], W has Q
  /// rows (W[q, p, f]), and the partial by W sums the edges of each pair; pair_edge [Q] int64:
  /// an edge of each pair (its row count is Q). Undefined: W has one row per edge.
  torch::Tensor pair, pair_edge;

  /// The neighbour ordering of `centre`/`neighbor` for `natoms` atoms (host or device).
  static void order_by_neighbor(const torch::Tensor& neighbor, int64_t natoms, torch::Tensor& by_neighbor,
                                torch::Tensor& neighbor_offsets);
};

/// One coupling term (m, d, s, p) of ContractionTables::terms with its coefficient c.
struct ContractionTerm {
  int64_t m, d, s, p;
  double c;
};

/// The tables' terms and coefficients as host terms (for the CPU kernels).
std::vector<ContractionTerm> contraction_terms(const ContractionTables& tables);

enum class ContractionKernel {
  /// by kernel_route (models/kernels/device_kernels.h): the CPU kernel for host tensors with the
  /// host kernels on, elsewhere kDevice with the device kernels on, else kGeneric
  kAuto,
  kGeneric,  ///< LibTorch operations (gathers, batched products, index_add): any device
  /// mlip's CUDA kernels on a CUDA device (an mlip::Error in a build without them), their host
  /// twin (the same arithmetic, contraction_rule.h) on the CPU
  kDevice,
};

/// ∂F/∂(operand `slot`) at the other three operands (`operands[slot]` is ignored), with autograd:
/// differentiable to any order (each derivative is another call of this function).
torch::Tensor contract(int64_t slot, const std::vector<torch::Tensor>& operands, const ContractionTables& tables);

/// The same without autograd, by the chosen kernel (tests compare the kernels).
torch::Tensor contract_kernel(int64_t slot, const std::vector<torch::Tensor>& operands,
                              const ContractionTables& tables, ContractionKernel kernel);

/// Registers `torch.ops.mlip.message_contract(slot, a, x, w, y, edges, terms, coefficients,
/// sizes)` for TorchScript (edges = [centre, neighbor, centre_offsets, by_neighbor,
/// neighbor_offsets], then optionally [pair, pair_edge]); idempotent.
void register_message_contraction();

}  // namespace mlip::models
