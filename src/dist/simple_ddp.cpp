#include "dist/simple_ddp.h"

#include <ATen/ATen.h>

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
  const int64_t total = numel_ + int64_t(extras.size());
  if (!flat_.defined() || flat_.numel() != total)
    flat_ = at::empty({total}, params_.empty() ? at::TensorOptions(at::kDouble) : params_[0].options().requires_grad(false));
  int64_t offset = 0;
  for (const auto& p : params_) {
    auto segment = flat_.narrow(0, offset, p.numel());
    if (p.grad().defined()) segment.copy_(p.grad().reshape({-1}));
    else segment.zero_();
    offset += p.numel();
  }
  for (size_t k = 0; k < extras.size(); ++k) flat_[numel_ + int64_t(k)].fill_(extras[k]);
  comm_.all_reduce_sum(flat_);
  offset = 0;
  const double inv = 1.0 / double(comm_.size());
  for (auto& p : params_) {
    auto segment = flat_.narrow(0, offset, p.numel()).view(p.sizes());
    segment.mul_(inv);
    if (p.grad().defined()) p.mutable_grad().copy_(segment);
    else p.mutable_grad() = segment.clone();
    offset += p.numel();
  }
  auto tail = flat_.narrow(0, numel_, int64_t(extras.size())).to(at::kDouble);
  for (size_t k = 0; k < extras.size(); ++k) extras[k] = tail[int64_t(k)].item<double>();
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
