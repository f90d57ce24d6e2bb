#pragma once

#include <torch/script.h>

#include <array>
#include <cstdint>
#include <vector>

namespace mlip::models {

/// The product basis of one interaction block, for one target irrep, as one multilinear
/// contraction (docs/equivariant.md "Body order"), the way the message contraction
/// (message_contraction.h) is one. With the five operands, all per node and channel,
///
///   G  [N, M, f]  one per target component m: the incoming gradient (slot 0)
///   W  [N, Q, f]  the weights of product q for the node's type, per channel (slot 1)
///   A1, A2, A3 [N, K, f]  the messages, all message irreps' components k side by side (slots 2-4)
///
/// and sparse terms (m, q, i, j, k, c) of d = 1, 2 or 3 factors (for d < 3 the absent slots' rows
/// are -1 in every term, and those operands are absent; q is -1 in every term of an unweighted
/// form, without W), the scalar
///
///   F = Σ_n Σ_terms Σ_f c · G[n, m, f] · W[n, q, f] · A1[n, i, f] · A2[n, j, f] · A3[n, k, f]
///
/// is linear in each present operand. The factors need not be the same tensor nor have the same
/// rows: the model couples the messages in pairs first, P = ∂F/∂G (no W) at A1 = A2 = the
/// messages A, then makes its products of d factors from A (d = 1), P (d = 2) or P and A
/// (d = 3; docs/equivariant.md "The training path"). Every derivative of every order of such a
/// P or B is again a partial ∂F/∂(slot) with some operands replaced by incoming gradients (a
/// tensor in several slots is several operands, and autograd adds their partials).
/// `product_contract` computes one such partial. (One coupling holds terms of one d only: a term
/// without a factor would be constant, not linear, in that operand.)
struct ProductCoupling {
  torch::Tensor terms;         ///< [T, 5] int64 rows (m, q, i, j, k); q (unweighted), j (d < 2), k (d < 3): -1
  torch::Tensor coefficients;  ///< [T] float64 c
  std::vector<int64_t> sizes;  ///< {M, Q, K1, K2, K3}: each slot's rows ({M, Q, K}: K1 = K2 = K3 = K)
};

enum class ProductKernel {
  /// by kernel_route (models/kernels/device_kernels.h): the CPU kernel for host tensors with the
  /// host kernels on, elsewhere kDevice with the device kernels on, else kGeneric
  kAuto,
  kGeneric,  ///< LibTorch operations (gathers, products, index_add): any device
  /// mlip's CUDA kernel on a CUDA device (an mlip::Error in a build without it), its host twin
  /// (the same arithmetic, product_rule.h) on the CPU
  kDevice,
};

/// ∂F/∂(operand `slot`) at the other operands (`operands[slot]` is ignored; absent ones are
/// undefined tensors), with autograd: differentiable to any order (each derivative is another
/// call of this function). The output has the shape of the operand of `slot`: [N, M, f],
/// [N, Q, f] or [N, K, f]; `slot` must be present.
torch::Tensor product_contract(int64_t slot, const std::vector<torch::Tensor>& operands,
                               const ProductCoupling& coupling);

/// The same without autograd, by the chosen kernel (tests compare the kernels). The CPU kernel
/// runs nodes in parallel, each node's terms in order: deterministic for any thread count.
torch::Tensor product_contract_kernel(int64_t slot, const std::vector<torch::Tensor>& operands,
                                      const ProductCoupling& coupling, ProductKernel kernel);

/// One form of a product sum: its coupling, and the operand of the sum each of its five slots
/// (G, W, A1, A2, A3) reads (-1 where the slot is absent). An operand fills one slot at most.
struct ProductForm {
  ProductCoupling coupling;
  std::array<int64_t, 5> operand;
};

/// Several forms over shared operands summed, F = Σ_forms F_form (a target's products of one,
/// two and three factors: forms (G, W, A), (G, W, P) and (G, W, P, A)), as one autograd node
/// per partial instead of one per form and the sums between them. Each form is linear in each
/// of its operands, so the partial of the sum by one operand, restricted to the forms that hold
/// every operand of `required` (a bit mask), differentiates again into partials of the same
/// kind: ∂/∂t ⟨g, ∂F_R/∂s⟩ = ∂F_{R ∪ {s}}/∂t with operand s replaced by g. `product_sum`
/// computes ∂F_R/∂(operand `operand`) at the others (operands[operand] is ignored), with
/// autograd, differentiable to any order; the output has that operand's shape.
torch::Tensor product_sum(int64_t operand, const std::vector<torch::Tensor>& operands,
                          const std::vector<ProductForm>& forms, int64_t required = 0);

/// Registers `torch.ops.mlip.product_basis(slot, g, w, a1, a2, a3, terms, coefficients, sizes)`
/// for TorchScript (operands optional: the one of `slot` and absent ones None), and
/// `torch.ops.mlip.product_sum(operands, terms, coefficients, sizes, slots)`: ∂F/∂(operand 0)
/// of a product sum whose operands 1.. are `operands`, form k's tables terms[k] and
/// coefficients[k], its sizes sizes[5k .. 5k+4] and its slots' operands slots[5k .. 5k+4];
/// idempotent.
void register_product_basis();

}  // namespace mlip::models
