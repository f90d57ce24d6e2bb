// The launch shape and launch check shared by mlip's element-wise CUDA kernels (the equivariant
// model's, docs/fused_kernels.md): blocks of kGridThreads threads, a grid striding over the
// elements beyond kMostGridBlocks blocks. For .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "error.h"

namespace mlip::models {

constexpr int kGridThreads = 256;
constexpr int64_t kMostGridBlocks = int64_t(1) << 20;

/// Blocks of kGridThreads for `threads` threads of work (at least 1, at most kMostGridBlocks).
inline int64_t grid_blocks(int64_t threads) {
  return std::max<int64_t>(1, std::min(kMostGridBlocks, (threads + kGridThreads - 1) / kGridThreads));
}

/// Throws mlip::Error when the last launch failed: "the <kernel> kernel did not launch (<what>,
/// <blocks> blocks of 256): <CUDA's reason>".
inline void check_grid_launch(const std::string& kernel, const std::string& what, int64_t blocks) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    throw Error("the " + kernel + " kernel did not launch (" + what + ", " + std::to_string(blocks) + " blocks of " +
                std::to_string(kGridThreads) + "): " + cudaGetErrorString(status));
}

}  // namespace mlip::models
