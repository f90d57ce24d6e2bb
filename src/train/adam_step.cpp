#include "train/adam_step.h"

#include <ATen/Parallel.h>
#include <c10/util/string_utils.h>

#include <cmath>

#include "error.h"

namespace mlip::train {
namespace {

template <typename Real>
void update(Real* p, const Real* g, Real* m, Real* v, int64_t n, double beta1, double beta2, double weight_decay,
            double step_size, double inv_sqrt_bc2, double eps) {
  const Real b1 = Real(beta1), b2 = Real(beta2), c1 = Real(1 - beta1), c2 = Real(1 - beta2), wd = Real(weight_decay);
  const Real ss = Real(step_size), isb = Real(inv_sqrt_bc2), e = Real(eps);
  at::parallel_for(0, n, 16384, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      const Real gk = wd != Real(0) ? g[k] + wd * p[k] : g[k];
      m[k] = b1 * m[k] + c1 * gk;
      v[k] = b2 * v[k] + c2 * gk * gk;
      p[k] -= ss * m[k] / (std::sqrt(v[k]) * isb + e);
    }
  });
}

}  // namespace

void adam_step(torch::optim::Adam& optimizer) {
  torch::NoGradGuard no_grad;
  for (auto& group : optimizer.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamOptions&>(group.options());
    if (o.amsgrad()) throw Error("adam_step: amsgrad is not supported");
    const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      // The state key of torch::optim::Adam.
      const std::string key = c10::guts::to_string(p.unsafeGetTensorImpl());
      auto& states = optimizer.state();
      auto it = states.find(key);
      if (it == states.end()) {
        auto fresh = std::make_unique<torch::optim::AdamParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        it = states.emplace(key, std::move(fresh)).first;
      }
      auto& st = static_cast<torch::optim::AdamParamState&>(*it->second);
      st.step(st.step() + 1);
      const double bc1 = 1 - std::pow(beta1, double(st.step())), bc2 = 1 - std::pow(beta2, double(st.step()));
      const at::Tensor grad = p.grad().contiguous();
      if (!p.is_contiguous() || !st.exp_avg().is_contiguous() || !st.exp_avg_sq().is_contiguous())
        throw Error("adam_step: parameters and their state must be contiguous");
      if (p.scalar_type() == at::kDouble)
        update<double>(p.data_ptr<double>(), grad.data_ptr<double>(), st.exp_avg().data_ptr<double>(),
                       st.exp_avg_sq().data_ptr<double>(), p.numel(), beta1, beta2, o.weight_decay(), o.lr() / bc1,
                       1 / std::sqrt(bc2), o.eps());
      else if (p.scalar_type() == at::kFloat)
        update<float>(p.data_ptr<float>(), grad.data_ptr<float>(), st.exp_avg().data_ptr<float>(),
                      st.exp_avg_sq().data_ptr<float>(), p.numel(), beta1, beta2, o.weight_decay(), o.lr() / bc1,
                      1 / std::sqrt(bc2), o.eps());
      else
        throw Error("adam_step: float32 or float64 parameters expected");
    }
  }
}

}  // namespace mlip::train
