#include "models/host_to_device.h"

namespace mlip::models {

namespace {

/// Whether a copy of `host` to `device` goes through page-locked memory.
bool through_pinned_memory(const torch::Tensor& host, const torch::Device& device) {
  return host.device().is_cpu() && device.is_cuda();
}

}  // namespace

torch::Tensor to_device_without_waiting(const torch::Tensor& host, const torch::Device& device) {
  if (!through_pinned_memory(host, device)) return host.to(device);
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

void copy_without_waiting(torch::Tensor& to, const torch::Tensor& host) {
  if (!through_pinned_memory(host, to.device())) {
    to.copy_(host);
    return;
  }
  to.copy_(host.pin_memory(), /*non_blocking=*/true);
}

}  // namespace mlip::models
