#include "models/kernels/environment_switch.h"

#include <cstdlib>
#include <string>

#include "error.h"

namespace mlip::models {

bool EnvironmentSwitch::enabled() {
  int state = state_.load(std::memory_order_relaxed);
  if (state < 0) {
    const char* value = std::getenv(variable_);
    const std::string text = value != nullptr ? value : "";
    if (text.empty())
      state = default_on_ ? 1 : 0;
    else if (text == "on" || text == "off")
      state = text == "on" ? 1 : 0;
    else
      throw Error(std::string(variable_) + ": expected \"on\" or \"off\" (or unset), got \"" + text + "\"");
    int undecided = -1;
    if (!state_.compare_exchange_strong(undecided, state)) state = state_.load();
  }
  return state == 1;
}

}  // namespace mlip::models
