#include "models/kernels/host_tensor.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "error.h"

namespace mlip::models {
namespace {

// -1: not decided yet (the environment is read at the first question), 0: off, 1: on.
std::atomic<int> g_host_kernels{-1};

int from_environment() {
  const char* value = std::getenv("MLIP_HOST_KERNELS");
  const std::string text = value != nullptr ? value : "";
  if (text.empty() || text == "on") return 1;
  if (text == "off") return 0;
  throw Error("MLIP_HOST_KERNELS: expected \"on\" or \"off\" (or unset), got \"" + text + "\"");
}

}  // namespace

bool host_kernels_enabled() {
  int state = g_host_kernels.load(std::memory_order_relaxed);
  if (state < 0) {
    state = from_environment();
    int undecided = -1;
    if (!g_host_kernels.compare_exchange_strong(undecided, state)) state = g_host_kernels.load();
  }
  return state == 1;
}

void set_host_kernels(bool enabled) { g_host_kernels = enabled ? 1 : 0; }

}  // namespace mlip::models
