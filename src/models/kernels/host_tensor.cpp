#include "models/kernels/host_tensor.h"

#include "models/kernels/environment_switch.h"

namespace mlip::models {
namespace {

EnvironmentSwitch g_host_kernels("MLIP_HOST_KERNELS", true);

}  // namespace

bool host_kernels_enabled() { return g_host_kernels.enabled(); }

void set_host_kernels(bool enabled) { g_host_kernels.set(enabled); }

}  // namespace mlip::models
