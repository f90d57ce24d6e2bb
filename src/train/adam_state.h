#pragma once

#include <torch/optim/adam.h>

#include <string>

namespace mlip::train {

/// torch::optim::Adam's state for a checkpoint: per parameter, its step count (int64) and
/// first and second moments (tensors of the parameter's shape and dtype), as the bytes of a
/// LibTorch optimiser archive (the layout torch::save(optimizer) writes: "state/<key>/step",
/// ".../exp_avg", ".../exp_avg_sq", "param_groups/<i>/params/<j>" = key, the group's options).
///
/// LibTorch's own save and load key the state by the parameters' addresses, which 1.13 writes
/// in hexadecimal and 2.x parses as decimal: a 2.x build loading a 1.13 checkpoint would put
/// every parameter's state under one key. Here the keys are the parameters' positions when
/// writing, and are matched as text when reading, so a checkpoint written by either LibTorch
/// (or by torch::save in earlier mlip versions) loads in either (docs/device.md "Two LibTorch
/// builds, one source"). Tensors are written from host copies.
std::string save_adam_state(const torch::optim::Adam& optimizer);

/// Replaces `optimizer`'s state with the one in `bytes`, its tensors moved to `device`.
/// Parameters without a state in `bytes` (never stepped) get none. An archive whose groups,
/// parameter counts, shapes or dtypes do not match the optimiser is an mlip::Error starting
/// with `what` (the checkpoint's path).
void load_adam_state(torch::optim::Adam& optimizer, const std::string& bytes, const c10::Device& device,
                     const std::string& what);

}  // namespace mlip::train
