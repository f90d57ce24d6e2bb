#pragma once

#include <torch/optim/adam.h>

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
/// Parameters outside host memory (a GPU) take the same update as LibTorch tensor operations;
/// `tensor_ops` makes host parameters take that path too (tests compare the two).
void adam_step(torch::optim::Adam& optimizer, Ema* ema = nullptr, bool tensor_ops = false);

}  // namespace mlip::train
