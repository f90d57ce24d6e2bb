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

void Ema::update() {
  at::NoGradGuard no_grad;
  const double w = 1 - next_decay();
  for (size_t k = 0; k < params_.size(); ++k) averages_[k].add_(params_[k].detach() - averages_[k], w);
  ++updates_;
}

void Ema::swap() {
  at::NoGradGuard no_grad;
  for (size_t k = 0; k < params_.size(); ++k) {
    const at::Tensor raw = params_[k].detach().clone();
    params_[k].detach().copy_(averages_[k]);
    averages_[k].copy_(raw);
  }
}

void Ema::reset(int64_t updates) {
  at::NoGradGuard no_grad;
  averages_.clear();
  for (const auto& p : params_) averages_.push_back(p.detach().clone(at::MemoryFormat::Contiguous));
  updates_ = updates;
}

}  // namespace mlip::train
