// The CUDA launches of the gate's kernels (gate_cuda.cu), without LibTorch headers; called by
// gate.cpp, which prepares the operands.
#pragma once

#include <cstdint>

#include "models/equivariant/gate_rule.h"

namespace mlip::models {

/// The stage for every (atom, channel) of args (one thread each: gate_forward_at,
/// gate_backward_at or gate_second_at), every pointer in the memory of the current CUDA device,
/// launched on `stream` (a cudaStream_t). Throws mlip::Error when the launch fails.
template <typename T>
void launch_gate(GateStage stage, const GateRuleArgs<T>& args, void* stream);

}  // namespace mlip::models
