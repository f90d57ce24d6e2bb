// The code a GPU runs, on the CPU: the switch the tests of the GPU's paths and of mlip's device
// kernels' host twins use (models/kernels/host_tensor.h, models/kernels/device_kernels.h).
#pragma once

#include "models/kernels/device_kernels.h"
#include "models/kernels/host_tensor.h"

namespace mlip::test {

/// While it lives: the host kernels off (the CPU takes the LibTorch operations a GPU runs) and
/// mlip's device kernels on (their host twins) or off; then both back to the tests' defaults.
struct GpuCodeOnTheCpu {
  explicit GpuCodeOnTheCpu(bool device_kernels = false) {
    mlip::models::set_host_kernels(false);
    mlip::models::set_device_kernels(device_kernels);
  }
  ~GpuCodeOnTheCpu() {
    mlip::models::set_host_kernels(true);
    mlip::models::set_device_kernels(false);
  }
  GpuCodeOnTheCpu(const GpuCodeOnTheCpu&) = delete;
  GpuCodeOnTheCpu& operator=(const GpuCodeOnTheCpu&) = delete;
};

/// f() with the host kernels off and mlip's device kernels' twins on when `twins`, as the tests
/// run otherwise.
template <typename F>
auto run_with_device_twins(bool twins, F f) {
  if (!twins) return f();
  GpuCodeOnTheCpu gpu_code(true);
  return f();
}

}  // namespace mlip::test
