#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "dist/communicator.h"

namespace mlip::dist {

/// Gradient synchronisation after the complete local backward (docs/distributed.md "What every step does (SimpleDDP)"):
/// every parameter gradient, in one fixed order (the same on every rank), sits in ONE flat
/// buffer of the parameters' dtype (zeros for a parameter without gradient), followed by the
/// caller's extra values; ONE all-reduce sums the buffer; the gradients are divided by the
/// world size, the extras come back summed. The buffer lives on the parameters' device (NCCL
/// then reduces it there; Gloo copies device tensors through the host). Exactly one collective per call. To save two
/// copies of the buffer per step, sync leaves every parameter's grad as a view of its segment
/// of the buffer (a grad found elsewhere is copied in first, so any grad works); the buffer is
/// the communicator's make_reduce_buffer, so through shared memory the all-reduce copies
/// nothing either, and divides the gradients by the world size as it sums them.
class SimpleDDP {
 public:
  /// `params`: the parameters, all of one floating dtype, in the same order on every rank.
  SimpleDDP(std::vector<at::Tensor> params, Communicator& comm);

  /// Averages the gradients over the ranks and sums `extras` (e.g. error sums for the displayed
  /// metrics, a stop flag) in the same all-reduce. A no-op on one rank.
  void sync(std::vector<double>& extras);
  /// The same with the extras as a 1-D float64 tensor on any device (summed in place): on a
  /// GPU the error sums then never leave the device.
  void sync(at::Tensor& extras);

  /// Elements in the flat buffer for the parameters (the bytes per step are this times the
  /// dtype size, plus the extras).
  int64_t numel() const { return numel_; }

 private:
  std::vector<at::Tensor> params_;
  Communicator& comm_;
  int64_t numel_ = 0;
  at::Tensor flat_;
};

/// Makes every rank's tensors equal to rank `root`'s (e.g. weights and statistics at start):
/// one broadcast per dtype, through a flat buffer.
void broadcast_tensors(Communicator& comm, const std::vector<at::Tensor>& tensors, int root = 0);

}  // namespace mlip::dist
