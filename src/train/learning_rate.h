#pragma once

#include <cstdint>
#include <string>

namespace mlip::train {

/// DeePMD's "exp" learning rate with linear warm-up (docs/training.md "Learning rate").
///   t <  warmup_steps: lr = f*start_lr + (1 - f)*start_lr*t/warmup_steps  (f = warmup_start_factor)
///   t >= warmup_steps: lr = max(stop_lr, start_lr * r^floor((t - warmup_steps)/decay_steps))
/// with r = decay_rate when given (> 0), else exp(ln(stop_lr/start_lr) / ((numb_steps -
/// warmup_steps)/decay_steps)). `scale` (from scale_by_worker) multiplies the result.
struct ExpLearningRate {
  double start_lr = 1e-3;
  double stop_lr = 1e-8;
  int64_t decay_steps = 5000;
  double decay_rate = 0.0;  ///< <= 0: derived from stop_lr and numb_steps
  int64_t warmup_steps = 0;
  double warmup_start_factor = 0.0;
  int64_t numb_steps = 1000000;
  double scale = 1.0;

  /// Throws mlip::Error naming the learning_rate key that is out of range.
  void validate() const;
  /// The decay factor r per decay_steps.
  double rate() const;
  /// Learning rate at step t (t = 0 is the first step).
  double at(int64_t step) const;
};

/// learning_rate.scale_by_worker: "linear" -> world_size, "sqrt" -> sqrt(world_size),
/// "none" -> 1. Throws mlip::Error for another mode.
double scale_by_worker(const std::string& mode, int world_size);

}  // namespace mlip::train
