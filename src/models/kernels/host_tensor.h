// Which tensors the hand-written CPU loops take.
#pragma once

#include <torch/script.h>

namespace mlip::models {

/// Whether t lives in host memory as float32 or float64: the dtypes the hand-written loops of the
/// training path are compiled for; other tensors take those nodes' LibTorch operations.
inline bool on_host(const torch::Tensor& t) {
  return t.device().is_cpu() && (t.scalar_type() == torch::kFloat64 || t.scalar_type() == torch::kFloat32);
}

}  // namespace mlip::models
