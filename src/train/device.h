#pragma once

#include <c10/core/Device.h>

#include <string>

namespace mlip::train {

/// Whether this build has CUDA (a LibTorch with CUDA; the feature summary of CMake says so).
bool build_has_cuda();

/// The device that `request` asks for: "auto" (cuda when the build has CUDA and a device is
/// visible, else cpu), "cpu", "cuda" or "cuda:K" (docs/device.md). For "auto" and "cuda", a
/// rank takes device `local_rank` mod the number of visible devices (one process drives one
/// device; CUDA_VISIBLE_DEVICES decides which are visible). `what` names the request in
/// messages ("training.device", "--device"). Throws mlip::Error naming what was asked and
/// what exists: `training.device: expected cpu (this build has no CUDA), got "cuda"`,
/// `--device cuda:3: this machine has 1 CUDA device (cuda:0)`.
c10::Device resolve_device(const std::string& request, const std::string& what, int local_rank = 0);

/// The memory of a CUDA device in bytes (its total); 0 for the CPU or when unknown.
double device_memory_bytes(const c10::Device& device);

/// The bytes LibTorch's caching allocator holds on a CUDA device now (its reserved segments,
/// captured graphs' memory pools included; what nvidia-smi sees of this process less the CUDA
/// context); 0 for the CPU.
double reserved_memory_bytes(const c10::Device& device);

/// The device for the summary: "cpu", or "cuda:0 (NVIDIA H100 80GB HBM3, 79.1 GiB)".
std::string describe_device(const c10::Device& device);

}  // namespace mlip::train
