// The gate's kernels (docs/fused_kernels.md "The gate"): the forward, the backward and its
// backward, each one launch with a thread per (atom, channel), instead of a few LibTorch
// operations per gated irrep. The arithmetic is gate_rule.h's, shared with the host twin.
#include <string>

#include "models/equivariant/gate_cuda.h"
#include "models/kernels/cuda_grid.h"

namespace mlip::models {
namespace {

template <typename T>
__global__ void gate_kernel(GateStage stage, GateRuleArgs<T> a) {
  const int64_t total = a.n * a.f;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = k / a.f;
    gate_stage_at(stage, a, r, k - r * a.f);
  }
}

}  // namespace

template <typename T>
void launch_gate(GateStage stage, const GateRuleArgs<T>& args, void* stream) {
  const int64_t total = args.n * args.f;
  if (total == 0) return;
  const int64_t blocks = grid_blocks(total);
  gate_kernel<T><<<unsigned(blocks), kGridThreads, 0, static_cast<cudaStream_t>(stream)>>>(stage, args);
  check_grid_launch("gate", std::to_string(args.n) + " atoms", blocks);
}

template void launch_gate<float>(GateStage, const GateRuleArgs<float>&, void*);
template void launch_gate<double>(GateStage, const GateRuleArgs<double>&, void*);

}  // namespace mlip::models
