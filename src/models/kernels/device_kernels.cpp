#include "models/kernels/device_kernels.h"

#include "models/kernels/environment_switch.h"

namespace mlip::models {
namespace {

EnvironmentSwitch g_device_kernels("MLIP_DEVICE_KERNELS", false);

}  // namespace

bool device_kernels_enabled() { return g_device_kernels.enabled(); }

void set_device_kernels(bool enabled) { g_device_kernels.set(enabled); }

bool cuda_kernels_compiled() {
#ifdef MLIP_HAVE_CUDA_KERNELS
  return true;
#else
  return false;
#endif
}

}  // namespace mlip::models
