// Which tensors the hand-written CPU loops take.
#pragma once

#include <torch/script.h>

namespace mlip::models {

/// Whether the hand-written CPU loops of the training path run at all (default: yes). Off
/// (`MLIP_HOST_KERNELS=off` in the environment, or set_host_kernels(false)): host tensors take
/// the LibTorch operations a GPU runs instead, so that the CPU checks a GPU's arithmetic against
/// its own loops (tests) and counts a GPU's operator calls (`mlip train --count-ops`,
/// docs/device.md "What a step asks of the host"). Throws mlip::Error for another value of the
/// variable.
bool host_kernels_enabled();
/// Sets it for the whole process (tests), whatever the environment says.
void set_host_kernels(bool enabled);

/// Whether t lives in host memory as float32 or float64, with the host kernels enabled: the
/// tensors the hand-written loops of the training path are compiled for; other tensors take
/// those nodes' LibTorch operations.
inline bool on_host(const torch::Tensor& t) {
  return t.device().is_cpu() && (t.scalar_type() == torch::kFloat64 || t.scalar_type() == torch::kFloat32) &&
         host_kernels_enabled();
}

}  // namespace mlip::models
