// The CUDA launch of the message contraction's kernels (message_contraction_cuda.cu), without
// LibTorch headers; called by message_contraction.cpp, which prepares the tables and operands.
#pragma once

#include <cstdint>

#include "models/equivariant/contraction_rule.h"

namespace mlip::models {

/// The partial by operand `slot` (0 messages, 1 features, 2 radial weights by edge, 3 harmonics)
/// into `out` (contiguous: [N, S, f], [N, D, f], [E, P, f] or [E, H]), over `rows` output rows
/// (N atoms for slots 0 and 1, E edges for 2 and 3): one thread per element of slots 0-2, one
/// warp per edge for slot 3. Every pointer in the memory of the current CUDA device; launched on
/// `stream` (a cudaStream_t). Throws mlip::Error when the launch fails.
template <typename T>
void launch_message_contraction(int64_t slot, const ContractionRuleArgs<T>& args, int64_t rows, T* out, void* stream);

}  // namespace mlip::models
