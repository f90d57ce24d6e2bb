// An on/off switch read once from an environment variable, settable by tests.
#pragma once

#include <atomic>

namespace mlip::models {

/// A process-wide on/off choice: the environment variable `variable` ("on", "off", or unset for
/// `default_on`), read at the first question, unless set() decided it before. Thread-safe.
class EnvironmentSwitch {
 public:
  constexpr EnvironmentSwitch(const char* variable, bool default_on) : variable_(variable), default_on_(default_on) {}
  /// Throws mlip::Error naming the variable for a value other than "on" or "off".
  bool enabled();
  void set(bool on) { state_ = on ? 1 : 0; }

 private:
  const char* variable_;
  bool default_on_;
  std::atomic<int> state_{-1};  // -1: not decided yet, 0: off, 1: on
};

}  // namespace mlip::models
