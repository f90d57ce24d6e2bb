#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace mlip::train {

/// Exponential moving average of the trainable parameters (NequIP's `ema_decay`, MACE's
/// `--ema`): the weights that validation, checkpoints, `mlip test` and `mlip freeze` use,
/// while the optimiser keeps stepping the raw ones. Starting from a = p, update n (n = 1, 2,
/// ...) after an optimiser step does
///   a <- a + (1 - d_n) (p - a),   d_n = min(decay, (1 + n) / (10 + n))
/// (the warm-up form of TensorFlow's ExponentialMovingAverage with num_updates, as NequIP's
/// `ema_use_num_updates`), so the first updates forget the random start quickly. The averages
/// have the parameters' shapes and dtypes (float32 or float64), and are computed in that dtype.
class Ema {
 public:
  /// `params`: the trainable parameters (shared, not copied: updates read their current
  /// values). `decay` in (0, 1). The averages start as copies of the parameters.
  Ema(std::vector<at::Tensor> params, double decay);

  double decay() const { return decay_; }
  /// Updates done so far (n of the last update).
  int64_t updates() const { return updates_; }
  /// d_n of the next update.
  double next_decay() const;

  /// One update from the parameters' current values. adam_step() can fuse it into the
  /// optimiser's pass instead (then it calls advance() itself).
  void update();
  /// The update of parameter k alone with a given weight 1 - d (adam_step's unfused case; the
  /// count is not advanced).
  void update_one(size_t k, double weight);
  /// Counts an update done elsewhere on averages() (adam_step's fused form).
  void advance() { ++updates_; }

  /// Exchanges the values of the parameters and the averages in place (their storage stays,
  /// so modules that hold the parameters see the averages): call it twice to undo. Allocates
  /// nothing and cannot fail (on a device it goes through scratch tensors made by reset()).
  void swap() noexcept;

  /// The averages start again as copies of the parameters, with `updates` updates counted.
  void reset(int64_t updates = 0);

  const std::vector<at::Tensor>& params() const { return params_; }
  const std::vector<at::Tensor>& averages() const { return averages_; }

 private:
  std::vector<at::Tensor> params_, averages_;
  std::vector<at::Tensor> scratch_;  // one per parameter not in host memory (swap's third place)
  double decay_;
  int64_t updates_ = 0;
};

/// While alive, the parameters hold the moving average's values (Ema::swap on construction and
/// again on destruction); nothing happens when `ema` is null (training.ema_decay 0).
class AveragedWeights {
 public:
  explicit AveragedWeights(Ema* ema) : ema_(ema) {
    if (ema_ != nullptr) ema_->swap();
  }
  ~AveragedWeights() {
    if (ema_ != nullptr) ema_->swap();
  }
  AveragedWeights(const AveragedWeights&) = delete;
  AveragedWeights& operator=(const AveragedWeights&) = delete;

 private:
  Ema* ema_;
};

}  // namespace mlip::train
