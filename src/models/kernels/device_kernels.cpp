#include "models/kernels/device_kernels.h"

#include <string>

#include "error.h"
#include "models/kernels/environment_switch.h"
#include "models/kernels/host_tensor.h"

namespace mlip::models {
namespace {

EnvironmentSwitch g_device_kernels("MLIP_DEVICE_KERNELS", false);

}  // namespace

bool device_kernels_enabled() { return g_device_kernels.enabled(); }

void set_device_kernels(bool enabled) { g_device_kernels.set(enabled); }

KernelRoute kernel_route(const c10::Device& device) {
  if (device.is_cpu() && host_kernels_enabled()) return KernelRoute::kHostLoops;
  return device_kernels_enabled() ? KernelRoute::kDeviceKernels : KernelRoute::kLibTorch;
}

const char* kernel_route_name(const c10::Device& device) {
  switch (kernel_route(device)) {
    case KernelRoute::kHostLoops:
      return "the CPU kernels";
    case KernelRoute::kLibTorch:
      return "LibTorch operations";
    default:
      return device.is_cpu() ? "the CUDA kernels' host twin" : "mlip's CUDA kernels";
  }
}

bool cuda_kernels_compiled() {
#ifdef MLIP_HAVE_CUDA_KERNELS
  return true;
#else
  return false;
#endif
}

void require_device_kernels(const char* operation, const c10::Device& device) {
  if (device.is_cuda() && !cuda_kernels_compiled())
    throw Error(std::string(operation) + ": mlip's CUDA kernels were asked for (MLIP_DEVICE_KERNELS=on) on " +
                device.str() +
                ", but this mlip was built without them (MLIP_CUDA_KERNELS=OFF, or a LibTorch without CUDA)");
  if (!device.is_cpu() && !device.is_cuda())
    throw Error(std::string(operation) + ": mlip's kernels run on the CPU or a CUDA device, got operands on " +
                device.str());
}

}  // namespace mlip::models
