// The product basis's partials (product_basis.h) one output element at a time: the arithmetic
// shared by the CUDA kernel (product_basis_cuda.cu) and its host twin (product_basis.cpp), so
// that the CPU tests check the very code the GPU runs (docs/fused_kernels.md "The product
// basis"). Plain C++ and CUDA: no LibTorch header.
#pragma once

#include <cstdint>

#include "models/kernels/host_device.h"

namespace mlip::models {

/// Slots of a product term: G, W, A1, A2, A3 (product_basis.h).
constexpr int kProductSlots = 5;

/// The operands and terms of one partial as raw pointers, all in one memory (the device's for
/// the kernel, the host's for the twin), operands contiguous [nodes, rows, f] in dtype T.
template <typename T>
struct ProductRuleArgs {
  /// [nterms, 5] each slot's row (m, q, i, j, k; -1 where absent), grouped by the output slot's row
  const int64_t* terms = nullptr;
  const T* coefficients = nullptr;  ///< [nterms] c of each term, in T
  const int64_t* group = nullptr;   ///< [rows + 1]: output row r's terms are [group[r], group[r + 1])
  int64_t f = 0;                    ///< channels
  /// each slot's operand, null for the output's slot and absent slots
  const T* operand[kProductSlots] = {};
  int64_t rows[kProductSlots] = {};  ///< rows per node of each slot's operand
};

/// Element (n, r, c) of the partial: Σ over the terms of output row r of c_t times the product of
/// the other present operands' rows at node n, channel c.
template <typename T>
MLIP_HOST_DEVICE inline T product_element(const ProductRuleArgs<T>& a, int64_t n, int64_t r, int64_t c) {
  T sum = T(0);
  for (int64_t t = a.group[r]; t < a.group[r + 1]; ++t) {
    const int64_t* row = a.terms + kProductSlots * t;
    T value = a.coefficients[t];
    for (int s = 0; s < kProductSlots; ++s)
      if (a.operand[s] != nullptr) value *= a.operand[s][(n * a.rows[s] + row[s]) * a.f + c];
    sum += value;
  }
  return sum;
}

}  // namespace mlip::models
