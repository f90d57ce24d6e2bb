// The message contraction's kernels (docs/fused_kernels.md "The message contraction"): each
// partial of the equivariant interaction's message step in one launch, every output element
// summed over its edges and coupling terms in registers and written once (no per-edge tensors,
// no atomics: the same numbers on every run). The arithmetic is contraction_rule.h's, shared with
// the host twin that the CPU tests check.
#include <string>

#include "models/equivariant/message_contraction_cuda.h"
#include "models/kernels/cuda_grid.h"

namespace mlip::models {
namespace {

/// Slots 0-2: element k of the output [rows, width, f], one thread each (the grid strides).
/// Consecutive threads take consecutive channels, so a warp reads consecutive operand values.
template <typename T>
__global__ void element_kernel(int64_t slot, ContractionRuleArgs<T> a, int64_t rows, int64_t width,
                               T* __restrict__ out) {
  const int64_t total = rows * width * a.f;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = k % a.f, rest = k / a.f, column = rest % width, row = rest / width;
    out[k] = slot == 0   ? contraction_message(a, row, column, c)
             : slot == 1 ? contraction_feature(a, row, column, c)
                         : contraction_radial(a, row, column, c);
  }
}

/// Slot 3: one warp per edge; lane l sums its channels (contraction_harmonic_lane), the warp adds
/// the lanes in butterfly_sum's order, lane 0 writes.
template <typename T>
__global__ void harmonics_kernel(ContractionRuleArgs<T> a, int64_t edges, T* __restrict__ out) {
  const int lane = int(threadIdx.x) % kContractionLanes;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / kContractionLanes);
  for (int64_t e = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kContractionLanes; e < edges; e += warps) {
    for (int64_t m = 0; m < a.H; ++m) {
      T value = contraction_harmonic_lane(a, e, m, lane);
      for (int distance = kContractionLanes / 2; distance > 0; distance /= 2)
        value += __shfl_xor_sync(0xffffffffu, value, distance);
      if (lane == 0) out[e * a.H + m] = value;
    }
  }
}

}  // namespace

template <typename T>
void launch_message_contraction(int64_t slot, const ContractionRuleArgs<T>& args, int64_t rows, T* out, void* stream) {
  if (rows == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  int64_t blocks = 0;
  if (slot == 3) {
    blocks = grid_blocks(rows * kContractionLanes);
    harmonics_kernel<T><<<unsigned(blocks), kGridThreads, 0, s>>>(args, rows, out);
  } else {
    const int64_t width = slot == 0 ? args.S : slot == 1 ? args.D : args.P;
    blocks = grid_blocks(rows * width * args.f);
    element_kernel<T><<<unsigned(blocks), kGridThreads, 0, s>>>(slot, args, rows, width, out);
  }
  check_grid_launch("message contraction (slot " + std::to_string(slot) + ")", std::to_string(rows) + " rows", blocks);
}

template void launch_message_contraction<float>(int64_t, const ContractionRuleArgs<float>&, int64_t, float*, void*);
template void launch_message_contraction<double>(int64_t, const ContractionRuleArgs<double>&, int64_t, double*, void*);

}  // namespace mlip::models
