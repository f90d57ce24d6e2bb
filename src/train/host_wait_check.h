// Finding where a step makes the host wait for a CUDA device (docs/device.md "What a step asks of
// the host").
#pragma once

namespace mlip::train {

/// While alive and `on`: every LibTorch operation that makes the host wait for a CUDA device (a
/// copy to or from pageable host memory, item(), nonzero, a stream or device synchronisation)
/// throws c10::Error "called a synchronizing CUDA operation" (LibTorch's sync debug mode), so
/// that a test can show a step free of such waits. Restores the mode it found when destroyed.
/// Process-wide: one at a time. Without CUDA in the build it does nothing (available() false).
class HostWaitCheck {
 public:
  explicit HostWaitCheck(bool on = true);
  ~HostWaitCheck();
  HostWaitCheck(const HostWaitCheck&) = delete;
  HostWaitCheck& operator=(const HostWaitCheck&) = delete;

  /// Whether this build can check (its LibTorch has CUDA).
  static bool available();

 private:
  bool on_;
  int previous_ = 0;  ///< the mode found (c10::cuda::SyncDebugMode as int)
};

}  // namespace mlip::train
