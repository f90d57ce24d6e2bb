// Host data copied to a device without making the host wait for the device (docs/device.md
// "What a step asks of the host").
#pragma once

#include <torch/script.h>

namespace mlip::models {

/// `host`'s copy on `device`, queued on the current stream without waiting for it.
///
/// `host.to(device)` of ordinary (pageable) host memory makes LibTorch wait until the copy is
/// done, and so until every kernel queued before it on the stream has run: a device read in all
/// but name, which stops a step's inputs from being prepared while the previous step runs. Here
/// the data is first copied into page-locked memory from LibTorch's caching host allocator
/// (which keeps that block until the copy has run), then copied to the device asynchronously.
/// The result has `host`'s dtype and shape. On a CUDA device it is a copy: `host` may be changed
/// or freed at once. A tensor already on `device` (the CPU included) is returned as it is, as
/// `.to(device)` does.
torch::Tensor to_device_without_waiting(const torch::Tensor& host, const torch::Device& device);

/// `to.copy_(host)` the same way: `to` (on any device) gets `host`'s values (same shape;
/// converted to `to`'s dtype), queued without waiting where `to` is on a CUDA device.
void copy_without_waiting(torch::Tensor& to, const torch::Tensor& host);

}  // namespace mlip::models
