#include "train/lagged_flag.h"

#include <string>

#include "error.h"

#ifdef MLIP_HAVE_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace mlip::train {

struct LaggedFlag::Pending {
  torch::Tensor host;  ///< [1] float64 on the host (page-locked when the values come from CUDA)
  bool queued = false;
#ifdef MLIP_HAVE_CUDA
  std::unique_ptr<at::cuda::CUDAEvent> copied;  ///< recorded after the copy from a CUDA device
#endif
};

LaggedFlag::LaggedFlag() : pending_(std::make_unique<Pending>()) {}

LaggedFlag::~LaggedFlag() = default;

bool LaggedFlag::exchange(const torch::Tensor& value) {
  if (value.numel() != 1 || value.scalar_type() != torch::kFloat64)
    throw Error("LaggedFlag: expected one float64 value, got " + std::to_string(value.numel()) + " of " +
                std::string(c10::toString(value.scalar_type())));
  Pending& p = *pending_;
  bool previous = false;
  if (p.queued) {
#ifdef MLIP_HAVE_CUDA
    if (p.copied) p.copied->synchronize();  // queued a step ago: done by now, as a rule
#endif
    previous = p.host.data_ptr<double>()[0] > 0;
  }
  const torch::Tensor flat = value.reshape({1});
#ifdef MLIP_HAVE_CUDA
  if (flat.is_cuda()) {
    if (!p.host.defined() || !p.host.is_pinned())
      p.host = torch::empty({1}, torch::TensorOptions().dtype(torch::kFloat64).pinned_memory(true));
    p.host.copy_(flat, /*non_blocking=*/true);
    if (!p.copied) p.copied = std::make_unique<at::cuda::CUDAEvent>();
    p.copied->record(c10::cuda::getCurrentCUDAStream(flat.device().index()));
    p.queued = true;
    return previous;
  }
  p.copied.reset();
#endif
  p.host = flat.to(torch::kCPU).clone();
  p.queued = true;
  return previous;
}

}  // namespace mlip::train
