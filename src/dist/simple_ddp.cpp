#include "dist/simple_ddp.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <map>

#include "error.h"

namespace mlip::dist {

SimpleDDP::SimpleDDP(std::vector<at::Tensor> params, Communicator& comm) : params_(std::move(params)), comm_(comm) {
  for (const auto& p : params_) {
    if (!params_.empty() && p.scalar_type() != params_[0].scalar_type())
      throw Error("SimpleDDP: expected parameters of one dtype, got " + std::string(c10::toString(p.scalar_type())) +
                  " and " + c10::toString(params_[0].scalar_type()));
    numel_ += p.numel();
  }
}

void SimpleDDP::sync(std::vector<double>& extras) {
  if (comm_.size() <= 1) return;
  auto t = at::tensor(extras, at::kDouble);
  sync(t);
  std::copy(t.data_ptr<double>(), t.data_ptr<double>() + extras.size(), extras.begin());
}

void SimpleDDP::sync(at::Tensor& extras) {
  if (comm_.size() <= 1) return;
  if (extras.dim() != 1 || extras.scalar_type() != at::kDouble)
    throw Error("SimpleDDP::sync: expected the extras as a 1-D float64 tensor");
  const int64_t count = extras.numel(), total = numel_ + count;
  // Made once (collectively: every rank gets here with the same total), where the all-reduce
  // is cheapest: through shared memory, the backward then writes the gradients straight into
  // this rank's slot of the segment. Parameters on a device get a buffer there.
  const at::ScalarType dtype = params_.empty() ? at::kDouble : params_[0].scalar_type();
  const bool on_host = params_.empty() || params_[0].device().is_cpu();
  if (!flat_.defined() || flat_.numel() != total)
    flat_ = on_host ? comm_.make_reduce_buffer(total, dtype)
                    : at::zeros({total}, at::TensorOptions(dtype).device(params_[0].device()));
  // The gradients live in the flat buffer: after the first step each parameter's grad is a view
  // of its segment (zero_grad zeroes in place, the backward accumulates in place), so nothing
  // is copied. A gradient found elsewhere (new, replaced, or absent) is copied in (zeros when
  // absent) and re-pointed at its segment.
  int64_t offset = 0;
  for (auto& p : params_) {
    auto segment = flat_.narrow(0, offset, p.numel()).view(p.sizes());
    at::Tensor& g = p.mutable_grad();
    if (!g.defined()) {
      segment.zero_();
      g = segment;
    } else if (g.data_ptr() != segment.data_ptr() || !g.is_contiguous()) {
      segment.copy_(g);
      g = segment;
    }
    offset += p.numel();
  }
  auto tail = flat_.narrow(0, numel_, count);
  tail.copy_(extras);
  comm_.all_reduce_sum(flat_, numel_);  // the gradients' mean, the extras' sum
  extras.copy_(tail);
}

void broadcast_tensors(Communicator& comm, const std::vector<at::Tensor>& tensors, int root) {
  if (comm.size() <= 1) return;
  std::map<int, std::vector<at::Tensor>> by_dtype;
  for (const auto& t : tensors) by_dtype[int(t.scalar_type())].push_back(t);
  for (auto& [dtype, group] : by_dtype) {
    int64_t total = 0;
    for (const auto& t : group) total += t.numel();
    auto flat = at::empty({total}, at::TensorOptions(at::ScalarType(dtype)));
    int64_t offset = 0;
    for (const auto& t : group) {
      flat.narrow(0, offset, t.numel()).copy_(t.detach().reshape({-1}));
      offset += t.numel();
    }
    comm.broadcast(flat, root);
    offset = 0;
    at::NoGradGuard guard;
    for (const auto& t : group) {
      t.detach().view(t.sizes()).copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

}  // namespace mlip::dist
