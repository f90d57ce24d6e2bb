#pragma once

#include <torch/script.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mlip::train {

/// Stops a training at the first non-finite loss, before the optimiser steps the weights with
/// it, and refuses to write a checkpoint of non-finite weights (docs/training.md "Non-finite
/// losses"). The newest checkpoint therefore always holds finite weights.
///
/// On the CPU the loss is read every step (it is already in host memory). On a GPU that read
/// would make the host wait for the device every step, so the first bad step is recorded on the
/// device and read at check_pending(), which the trainer calls before it displays or saves: a
/// non-finite step may then have been taken, but its weights are never written.
class NonFiniteGuard {
 public:
  /// on_host: the losses live in host memory (check at once).
  explicit NonFiniteGuard(bool on_host);

  /// After the loss of training step `step` (1-based): `loss` is its sum over the batch
  /// ([] or [1] float64, on the model's device). `batch` names the batch's frames; it is
  /// called only for a message.
  void after_loss(const torch::Tensor& loss, int64_t step, const std::function<std::string()>& batch);
  /// The validation loss at step `step` (host number): a non-finite one is an error.
  void after_validation(double loss, int64_t step) const;
  /// Also reads `first_bad_step` ([1] int64 on the device, INT64_MAX: none) at check_pending():
  /// the record of a step that runs without after_loss (train/static_step.h).
  void watch(const torch::Tensor& first_bad_step) { watched_ = first_bad_step; }
  /// Throws when a recorded loss was not finite (the device's records, read now).
  void check_pending();
  /// Throws when any parameter holds NaN or Inf: called before a checkpoint is written.
  void check_parameters(const std::vector<torch::Tensor>& parameters, int64_t step) const;
  /// The newest checkpoint written by this run (for messages); empty: none yet.
  void set_newest_checkpoint(const std::string& path) { newest_checkpoint_ = path; }

 private:
  [[noreturn]] void fail(const std::string& what, int64_t step) const;

  bool on_host_;
  /// [1] int64 on the device: the first step whose loss was not finite (INT64_MAX: none).
  torch::Tensor first_bad_step_;
  torch::Tensor watched_;  ///< watch()'s record, or undefined
  std::string newest_checkpoint_;
};

}  // namespace mlip::train
