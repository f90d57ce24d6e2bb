#include "train/ema.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <string>

#include "error.h"

namespace mlip::train {

Ema::Ema(std::vector<at::Tensor> params, double decay) : params_(std::move(params)), decay_(decay) {
  if (!(decay > 0 && decay < 1)) throw Error("Ema: decay must be in (0, 1), got " + std::to_string(decay));
  for (const auto& p : params_) {
    if (!p.is_contiguous()) throw Error("Ema: parameters must be contiguous");
    if (p.scalar_type() != at::kFloat && p.scalar_type() != at::kDouble)
      throw Error("Ema: float32 or float64 parameters expected");
  }
  reset(0);
}

double Ema::next_decay() const {
  const double n = double(updates_ + 1);
  return std::min(decay_, (1 + n) / (10 + n));
}

void Ema::update_one(size_t k, double weight) {
  at::NoGradGuard no_grad;
  averages_[k].add_(params_[k].detach() - averages_[k], weight);
}

void Ema::update() {
  const double w = 1 - next_decay();
  for (size_t k = 0; k < params_.size(); ++k) update_one(k, w);
  ++updates_;
}

void Ema::swap() noexcept {
  // Element by element on the raw storage (both contiguous, same dtype and size: checked in
  // the constructor and kept by reset()).
  for (size_t k = 0; k < params_.size(); ++k) {
    const int64_t n = params_[k].numel();
    if (!params_[k].device().is_cpu()) {  // device memory: three copies on the device
      at::NoGradGuard no_grad;
      scratch_[k].copy_(params_[k].detach());
      params_[k].detach().copy_(averages_[k]);
      averages_[k].copy_(scratch_[k]);
    } else if (params_[k].scalar_type() == at::kDouble) {
      double* p = params_[k].data_ptr<double>();
      std::swap_ranges(p, p + n, averages_[k].data_ptr<double>());
    } else {
      float* p = params_[k].data_ptr<float>();
      std::swap_ranges(p, p + n, averages_[k].data_ptr<float>());
    }
  }
}

void Ema::reset(int64_t updates) {
  at::NoGradGuard no_grad;
  averages_.clear();
  scratch_.clear();
  for (const auto& p : params_) {
    averages_.push_back(p.detach().clone(at::MemoryFormat::Contiguous));
    scratch_.push_back(p.device().is_cpu() ? at::Tensor() : at::empty_like(p));
  }
  updates_ = updates;
}

}  // namespace mlip::train
