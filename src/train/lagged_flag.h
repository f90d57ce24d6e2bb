// A flag made on the device every step and read by the host a step later (docs/distributed.md
// "What every step does (SimpleDDP)").
#pragma once

#include <torch/script.h>

#include <memory>

namespace mlip::train {

/// A number made on the device at every step (the ranks' summed stop flag) that the host reads
/// one step late, so that reading it does not make the host wait for the step that made it.
/// On a CUDA device each value is copied to page-locked host memory without waiting; by the next
/// step that copy has long run (it is waited for only if not). On the CPU the value is kept as it
/// is. Every rank reads the value of the same step at the same step, so ranks that act on it
/// still agree.
class LaggedFlag {
 public:
  LaggedFlag();
  ~LaggedFlag();
  LaggedFlag(const LaggedFlag&) = delete;
  LaggedFlag& operator=(const LaggedFlag&) = delete;

  /// Queues `value` (one element, float64, on any device) for the next call and returns whether
  /// the value queued by the previous call was > 0 (false at the first call).
  bool exchange(const torch::Tensor& value);

 private:
  struct Pending;  ///< the queued value's host copy (and on CUDA its copy's event)
  std::unique_ptr<Pending> pending_;
};

}  // namespace mlip::train
