// Whether mlip's own CUDA kernels take the equivariant model's operations on a GPU.
#pragma once

#include <c10/core/Device.h>

namespace mlip::models {

/// Whether the equivariant model's message contraction runs through mlip's own kernels
/// (docs/fused_kernels.md "The message contraction") where it would otherwise take LibTorch's
/// operations: on a CUDA device the CUDA kernels, on the CPU with the host kernels off
/// (MLIP_HOST_KERNELS=off) their host twin. `MLIP_DEVICE_KERNELS=on` in the environment, or
/// set_device_kernels(true); default off until a GPU has measured them. Throws mlip::Error for
/// another value of the variable.
bool device_kernels_enabled();
/// Sets it for the whole process (tests), whatever the environment says.
void set_device_kernels(bool enabled);

/// Which code takes a custom node's work (the equivariant model's contractions and gate) for
/// operands on a device: the CPU's hand-written loops (host tensors with the host kernels on),
/// else mlip's device kernels when they are on (the CUDA kernels, or their host twins on the
/// CPU), else LibTorch's operations.
enum class KernelRoute { kHostLoops, kDeviceKernels, kLibTorch };
KernelRoute kernel_route(const c10::Device& device);
/// The route's words for the model line of `mlip train`: "the CPU kernels", "mlip's CUDA
/// kernels", "the CUDA kernels' host twin" or "LibTorch operations".
const char* kernel_route_name(const c10::Device& device);

/// Whether this build compiled the CUDA kernels (CMake's MLIP_CUDA_KERNELS).
bool cuda_kernels_compiled();

/// Throws mlip::Error, naming `operation`, unless mlip's kernels can run on `device`: the CPU
/// (their host twins), or a CUDA device in a build with the CUDA kernels.
void require_device_kernels(const char* operation, const c10::Device& device);

}  // namespace mlip::models
