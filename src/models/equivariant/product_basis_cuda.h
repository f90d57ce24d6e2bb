// The CUDA launch of the product basis's kernel (product_basis_cuda.cu), without LibTorch
// headers; called by product_basis.cpp, which prepares the terms and operands.
#pragma once

#include <cstdint>

#include "models/equivariant/product_rule.h"

namespace mlip::models {

/// out [nodes, out_rows, f] (contiguous) = the partial (product_element), or, with
/// `accumulate`, out += it; one thread per element. Every pointer in the memory of the current
/// CUDA device; launched on `stream` (a cudaStream_t). Throws mlip::Error when the launch fails.
template <typename T>
void launch_product_basis(const ProductRuleArgs<T>& args, int64_t nodes, int64_t out_rows, T* out, bool accumulate,
                          void* stream);

}  // namespace mlip::models
