#pragma once

#include <torch/optim/adam.h>
#include <torch/script.h>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/model.h"
#include "train/batch_loss.h"
#include "train/ema.h"

namespace mlip::train {

/// A training step that reads everything that changes from step to step out of buffers of
/// fixed shapes and addresses, so that a CUDA graph can capture it once per shape and replay it
/// (docs/device.md "Static shapes"): the model's packed inputs (Model::pack, which needs a model
/// built with ModelContext::static_shapes), the labels, and one float64 buffer of the step's
/// numbers (Adam's step size and bias correction, the moving average's weight, the loss
/// prefactors) plus the step's index for the non-finite record. Inside the step nothing is read
/// back to the host and no tensor is made from host data.
///
/// One step: zero the gradients, predict_packed, the loss (train/batch_loss.h), its gradient,
/// Model::backward, the non-finite record, adam_update_from (train/adam_step.h) with the moving
/// average. Without capture (the CPU, or a build without CUDA) the same step runs operation by
/// operation from the same buffers, which is how the CPU tests check it against the usual step.
///
/// Several ranks: the step is two parts, the gradients (zeroing to the model's backward) and the
/// update (the non-finite record and Adam), each captured as a graph of its own, with the
/// caller's all-reduce of the gradients and the error sums run between them, uncaptured.
class StaticStep {
 public:
  /// Run between the gradients and the update, uncaptured, with the step's error sums [4]
  /// float64 on the device (BatchLoss::sums, this rank's): it must average the parameters'
  /// gradients over the ranks and sum `sums` over them, both in place (the gradients' tensors
  /// may be replaced by others, as SimpleDDP's first sync does, but not from the second step on:
  /// the captured update reads the tensors the step before capture left).
  using Synchronise = std::function<void(torch::Tensor& sums)>;

  /// `capture`: capture each shape's step as a CUDA graph once it has run `warmup` times (CUDA
  /// devices in CUDA builds only: otherwise the constructor records why not, capture_status()).
  /// A capture that fails is said once on `log` (if not null), and the steps run uncaptured.
  /// `synchronise`: empty with one rank (the step is one part, one graph per shape).
  StaticStep(models::Model& model, torch::optim::Adam& optimizer, Ema* ema, std::vector<torch::Tensor> parameters,
             torch::Device device, bool capture, std::ostream* log = nullptr, int warmup = 2,
             Synchronise synchronise = {});
  ~StaticStep();
  StaticStep(const StaticStep&) = delete;
  StaticStep& operator=(const StaticStep&) = delete;

  /// Step `step` (1-based) on a batch of `frames` of the system `atoms` with their `labels`:
  /// copies the inputs, labels and the step's numbers into the buffers of the batch's shape,
  /// then runs (or replays) the step. Returns the error sums [4] float64 of the step
  /// (BatchLoss::sums; summed over the ranks with `synchronise`), a tensor of its own on the
  /// device.
  torch::Tensor run(const models::SystemAtoms& atoms, const std::vector<const models::FrameInput*>& frames,
                    const BatchLabels& labels, double prefactor_e, double prefactor_f, double prefactor_v,
                    int64_t step);

  /// [1] int64 on the device: the first step whose loss was not finite (INT64_MAX: none).
  const torch::Tensor& first_bad_step() const { return first_bad_step_; }
  /// Whether steps are captured, or why not: "captured as CUDA graphs", or "not captured: ...".
  const std::string& capture_status() const { return capture_status_; }
  /// Steps replayed wholly from captured graphs, and graphs captured, so far (two per shape with
  /// `synchronise`).
  int64_t replays() const { return replays_; }
  int64_t captures() const;

 private:
  struct Slot;
  Slot& slot_for(const models::SystemAtoms& atoms, const std::vector<const models::FrameInput*>& frames,
                 const BatchLabels& labels);
  /// The first part: the gradients of the slot's batch in the parameters' gradient tensors (the
  /// ones they had before it), the error sums in slot.sums.
  void gradients(Slot& slot, const models::SystemAtoms& atoms);
  /// The second part: the non-finite record from slot.sums and Adam's update with the average.
  void update(Slot& slot);
  /// Runs part `part` of the slot (0 or 1) by `body`: replayed, captured then replayed, or run
  /// operation by operation. Returns whether it was replayed.
  bool run_part(Slot& slot, int part, const std::function<void()>& body);
  /// Captures `body` as the slot's graph `part` (CUDA builds); on failure, turns capture off.
  void capture(Slot& slot, int part, const std::function<void()>& body);

  models::Model& model_;
  torch::optim::Adam& optimizer_;
  Ema* ema_;
  std::vector<torch::Tensor> parameters_;
  torch::Device device_;
  bool capture_;
  std::ostream* log_;
  int warmup_;
  Synchronise synchronise_;
  std::string capture_status_;
  int64_t replays_ = 0;
  /// The step's numbers: advance_adam's [2·G + 1], then the prefactors {e, f, v}: float64 on the
  /// device, refilled before each step; step_index_ [1] int64 likewise.
  torch::Tensor scalars_, step_index_;
  torch::Tensor first_bad_step_;
  std::map<std::vector<int64_t>, std::unique_ptr<Slot>> slots_;
  /// The one memory pool every graph is captured into (LibTorch's MempoolId_t; {0, 0} until the
  /// first capture): the graphs replay one at a time and keep nothing in it for later, so they
  /// share one step's worth of temporaries (docs/device.md "Static shapes").
  std::pair<unsigned long long, unsigned long long> pool_{0, 0};
};

}  // namespace mlip::train
