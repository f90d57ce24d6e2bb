// The gate's kernels (docs/fused_kernels.md "The gate"): the forward, the backward and its
// backward, each one launch with a thread per (atom, channel), instead of a few LibTorch
// operations per gated irrep. The arithmetic is gate_rule.h's, shared with the host twin.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "error.h"
#include "models/equivariant/gate_cuda.h"

namespace mlip::models {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMostBlocks = int64_t(1) << 20;  // the grid strides over the rest

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
  const int64_t blocks = std::max<int64_t>(1, std::min(kMostBlocks, (total + kThreads - 1) / kThreads));
  gate_kernel<T><<<unsigned(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(stage, args);
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    throw Error("the gate kernel did not launch (" + std::to_string(args.n) + " atoms, " + std::to_string(blocks) +
                " blocks of " + std::to_string(kThreads) + "): " + cudaGetErrorString(status));
}

template void launch_gate<float>(GateStage, const GateRuleArgs<float>&, void*);
template void launch_gate<double>(GateStage, const GateRuleArgs<double>&, void*);

}  // namespace mlip::models
