// Moving a TorchScript module to a device, every tensor it holds (docs/device.md "What lives
// where").
#pragma once

#include <torch/script.h>

namespace mlip::models {

/// Moves `module` to `device`: its parameters and buffers (what `Module::to` moves) and also
/// every other tensor attribute, in it and its submodules (statistics such as se_e2_a's
/// davg/dstd/bias or the equivariant model's scale/shift, which models register as plain
/// attributes; `Module::to` leaves those where they are). Parameters keep their identity
/// (moved in place, as `Module::to` does), so an optimiser holding them stays valid; a plain
/// attribute is replaced by its copy on `device` (dtype unchanged).
void move_module(torch::jit::Module& module, const torch::Device& device);

}  // namespace mlip::models
