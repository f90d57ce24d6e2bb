#pragma once

// The CUDA launch of the fused embedding kernel (fused_embedding_cuda.cu), without LibTorch
// headers; called by fused_embedding.cpp, which checks the tensors first.

#include <cstdint>

#include "models/se_e2_a/fused_embedding_rule.h"

namespace mlip::models {

/// G and dG/ds [q, M] (g, slope; M = net.out[net.layers - 1]) of q inputs s[p * stride], all
/// pointers in the memory of the current CUDA device, launched on `stream` (a cudaStream_t).
/// Throws mlip::Error when the launch fails.
template <typename R>
void launch_fused_embedding(const FusedNet<R>& net, const R* s, int64_t stride, int64_t q, R* g, R* slope,
                            void* stream);

/// The adjoint of launch_fused_embedding for q inputs s[p * stride], given d loss / dG and
/// d loss / d(dG/ds) (grad_value, grad_slope: contiguous [q, M]): fills `scratch` and
/// d loss / ds [q] (input_gradient, may be null). Throws mlip::Error when the launch fails.
template <typename R>
void launch_fused_embedding_adjoint(const FusedNet<R>& net, const R* s, int64_t stride, int64_t q, const R* grad_value,
                                    const R* grad_slope, const FusedAdjointScratch<R>& scratch, R* input_gradient,
                                    void* stream);

}  // namespace mlip::models
