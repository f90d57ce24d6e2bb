#pragma once

#include <torch/optim/adam.h>

#include <vector>

#include "train/ema.h"

namespace mlip::train {

/// One step of `optimizer`, with the update of torch::optim::Adam (same formula, same state
/// tensors and step counts, so checkpoints of the optimiser stay interchangeable), fused into a
/// single parallel pass over each parameter instead of LibTorch's seven tensor operations:
/// memory-bound on the ~10^6 fitting-net parameters, it is the part of a training step that
/// does not shrink with the model's arithmetic. float32 and float64 parameters; no amsgrad.
/// With `ema`, the moving average's update (Ema::update) is fused into the same pass: `ema`
/// must average exactly the optimiser's parameters.
///
/// Parameters outside host memory (a GPU) take the same update as LibTorch's multi-tensor
/// operations (at::_foreach_*: about ten launches for a whole parameter group, not ten per
/// parameter); `tensor_ops` makes host parameters take that path too (tests compare the two).
void adam_step(torch::optim::Adam& optimizer, Ema* ema = nullptr, bool tensor_ops = false);

/// adam_step in two halves, for a step that a CUDA graph replays (docs/device.md "Static
/// shapes"): a replayed graph runs the kernels it captured with the numbers they were captured
/// with, so whatever changes from step to step (the learning rate, the bias corrections, the
/// moving average's weight) must be read from device memory.
///
/// The host half: advances every parameter's step count and the moving average's update count
/// as adam_step does (so checkpoints and restarts see the same state), creating missing state,
/// and returns the numbers the device half reads, [2·G + 1] for G parameter groups: per group
/// {lr / (1 - beta1^t), 1 / sqrt(1 - beta2^t)}, then the moving average's weight 1 - d_n (0
/// without `ema`). Every parameter needs a gradient and a group's parameters one step count
/// (mlip::Error otherwise).
std::vector<double> advance_adam(torch::optim::Adam& optimizer, Ema* ema = nullptr);

/// The device half: the update of adam_step's tensor operations with those numbers read from
/// `scalars` ([2·G + 1] float64 on the parameters' device, advance_adam's values): no number in
/// the kernels it launches changes from step to step, and it reads nothing back to the host.
void adam_update_from(torch::optim::Adam& optimizer, Ema* ema, const torch::Tensor& scalars);

}  // namespace mlip::train
