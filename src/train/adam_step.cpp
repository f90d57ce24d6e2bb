#include "train/adam_step.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <string>
#include <vector>

#include "compat/libtorch.h"
#include "error.h"
#include "models/kernels/target_clones.h"

namespace mlip::train {
namespace {

/// The Adam update of entries k0..k1 of one parameter; with `avg`, also the moving average's
/// update avg <- avg + avg_weight (p - avg) from the new p (Ema's formula, while p is in a
/// register). One pass, vectorised: compiled per instruction set (models/kernels/target_clones.h)
/// and with -fno-math-errno (src/train/CMakeLists.txt), so that the square root and the
/// division are vector instructions (IEEE-exact as the scalar ones).
template <typename Real>
MLIP_INLINE void update_range(Real* p, const Real* g, Real* m, Real* v, int64_t k0, int64_t k1, Real b1, Real b2,
                              Real wd, Real ss, Real isb, Real e, Real* avg, Real aw) {
  const Real c1 = 1 - b1, c2 = 1 - b2;
  for (int64_t k = k0; k < k1; ++k) {
    const Real gk = wd != Real(0) ? g[k] + wd * p[k] : g[k];
    m[k] = b1 * m[k] + c1 * gk;
    v[k] = b2 * v[k] + c2 * gk * gk;
    p[k] -= ss * m[k] / (std::sqrt(v[k]) * isb + e);
  }
  if (avg != nullptr)
    for (int64_t k = k0; k < k1; ++k) avg[k] += aw * (p[k] - avg[k]);
}

MLIP_CLONES void update_range_of(double* p, const double* g, double* m, double* v, int64_t k0, int64_t k1, double b1,
                                 double b2, double wd, double ss, double isb, double e, double* avg, double aw) {
  update_range<double>(p, g, m, v, k0, k1, b1, b2, wd, ss, isb, e, avg, aw);
}

MLIP_CLONES void update_range_of(float* p, const float* g, float* m, float* v, int64_t k0, int64_t k1, float b1,
                                 float b2, float wd, float ss, float isb, float e, float* avg, float aw) {
  update_range<float>(p, g, m, v, k0, k1, b1, b2, wd, ss, isb, e, avg, aw);
}

/// The Adam update of one parameter (and its moving average), in ranges over LibTorch's threads.
template <typename Real>
void update(Real* p, const Real* g, Real* m, Real* v, int64_t n, double beta1, double beta2, double weight_decay,
            double step_size, double inv_sqrt_bc2, double eps, Real* avg, double avg_weight) {
  at::parallel_for(0, n, 16384, [&](int64_t k0, int64_t k1) {
    update_range_of(p, g, m, v, k0, k1, Real(beta1), Real(beta2), Real(weight_decay), Real(step_size),
                    Real(inv_sqrt_bc2), Real(eps), avg, Real(avg_weight));
  });
}

/// The update of `update` above as tensor operations, for any device, of all the parameters of
/// one group at once (LibTorch's multi-tensor operations: on a GPU one launch per operation for
/// the whole list, not one per parameter). Per parameter k: step_size[k] = lr / (1 - beta1^t),
/// inv_sqrt_bc2[k] = 1 / sqrt(1 - beta2^t) with its own step count t; `avgs` empty without a
/// moving average.
struct TensorOpsGroup {
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, avgs;
  std::vector<at::Scalar> neg_step_sizes, inv_sqrt_bc2s;
};

void update_with_tensor_ops(const TensorOpsGroup& u, double beta1, double beta2, double weight_decay, double eps,
                            double avg_weight) {
  if (u.params.empty()) return;
  const std::vector<at::Tensor> g = weight_decay != 0 ? at::_foreach_add(u.grads, u.params, weight_decay) : u.grads;
  at::_foreach_mul_(u.exp_avgs, beta1);
  at::_foreach_add_(u.exp_avgs, g, 1 - beta1);
  at::_foreach_mul_(u.exp_avg_sqs, beta2);
  at::_foreach_addcmul_(u.exp_avg_sqs, g, g, 1 - beta2);
  const std::vector<at::Tensor> denominator = at::_foreach_sqrt(u.exp_avg_sqs);
  at::_foreach_mul_(denominator, u.inv_sqrt_bc2s);
  at::_foreach_add_(denominator, eps);
  at::_foreach_addcdiv_(u.params, u.exp_avgs, denominator, u.neg_step_sizes);
  if (!u.avgs.empty()) at::_foreach_add_(u.avgs, at::_foreach_sub(u.params, u.avgs), avg_weight);
}

/// The index in `ema` of each of the optimiser's parameters, in their order (checked up front,
/// so that a mismatch fails before anything is updated).
std::vector<size_t> averages_in_order(torch::optim::Adam& optimizer, const Ema& ema) {
  std::vector<size_t> out;
  for (auto& group : optimizer.param_groups())
    for (auto& p : group.params()) {
      const auto& ps = ema.params();
      size_t k = 0;
      while (k < ps.size() && ps[k].unsafeGetTensorImpl() != p.unsafeGetTensorImpl()) ++k;
      if (k == ps.size()) throw Error("adam_step: a parameter of the optimiser has no moving average");
      out.push_back(k);
    }
  if (out.size() != ema.params().size())
    throw Error("adam_step: the optimiser has " + std::to_string(out.size()) + " parameters, the moving average " +
                std::to_string(ema.params().size()));
  return out;
}

/// The state of parameter `p` in `optimizer`, made (zero moments, step 0) when missing.
torch::optim::AdamParamState& state_of(torch::optim::Adam& optimizer, const at::Tensor& p) {
  const auto key = compat::optimizer_state_key(p);
  auto& states = optimizer.state();
  auto it = states.find(key);
  if (it == states.end()) {
    auto fresh = std::make_unique<torch::optim::AdamParamState>();
    fresh->step(0);
    fresh->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
    fresh->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
    it = states.emplace(key, std::move(fresh)).first;
  }
  return static_cast<torch::optim::AdamParamState&>(*it->second);
}

}  // namespace

std::vector<double> advance_adam(torch::optim::Adam& optimizer, Ema* ema) {
  std::vector<double> scalars;
  size_t group_index = 0;
  for (auto& group : optimizer.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamOptions&>(group.options());
    if (o.amsgrad()) throw Error("advance_adam: amsgrad is not supported");
    int64_t step = -1;
    for (auto& p : group.params()) {
      if (!p.grad().defined())
        throw Error("advance_adam: every parameter needs a gradient (group " + std::to_string(group_index) + ")");
      auto& st = state_of(optimizer, p);
      if (step >= 0 && st.step() != step)
        throw Error("advance_adam: the parameters of group " + std::to_string(group_index) +
                    " are at different step counts (" + std::to_string(step) + " and " + std::to_string(st.step()) +
                    ")");
      step = st.step();
      st.step(step + 1);
    }
    const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas()), t = double(step + 1);
    scalars.push_back(o.lr() / (1 - std::pow(beta1, t)));
    scalars.push_back(1 / std::sqrt(1 - std::pow(beta2, t)));
    ++group_index;
  }
  scalars.push_back(ema != nullptr ? 1 - ema->next_decay() : 0.0);
  if (ema != nullptr) ema->advance();
  return scalars;
}

void adam_update_from(torch::optim::Adam& optimizer, Ema* ema, const torch::Tensor& scalars) {
  torch::NoGradGuard no_grad;
  const std::vector<size_t> order = ema != nullptr ? averages_in_order(optimizer, *ema) : std::vector<size_t>{};
  const int64_t groups = int64_t(optimizer.param_groups().size());
  if (scalars.dim() != 1 || scalars.size(0) != 2 * groups + 1)
    throw Error("adam_update_from: expected " + std::to_string(2 * groups + 1) + " scalars (advance_adam's), got " +
                std::to_string(scalars.numel()));
  size_t index = 0;
  int64_t group_index = 0;
  for (auto& group : optimizer.param_groups()) {
    if (group.params().empty()) {
      ++group_index;
      continue;
    }
    const auto& o = static_cast<const torch::optim::AdamOptions&>(group.options());
    const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
    // The numbers in the parameters' dtype (a multi-tensor operation reads its scalar tensor in
    // the list's dtype; an in-place product of float32 by a float64 number is float32 anyway).
    const at::Tensor numbers = scalars.to(group.params()[0].scalar_type());
    const at::Tensor step_size = numbers[2 * group_index], inv_sqrt_bc2 = numbers[2 * group_index + 1];
    const at::Tensor avg_weight = numbers[2 * groups];
    std::vector<at::Tensor> params, grads, m, v, avgs;
    for (auto& p : group.params()) {
      const size_t k = index++;
      auto& st = state_of(optimizer, p);
      params.push_back(p);  // changed in place under no_grad: no detach, one operator call fewer each
      grads.push_back(p.grad());
      m.push_back(st.exp_avg());
      v.push_back(st.exp_avg_sq());
      if (ema != nullptr) avgs.push_back(ema->averages()[order[k]]);
    }
    // As update_with_tensor_ops, for the whole group at once (one launch per operation on a
    // GPU), each scalar that changes from step to step a tensor on the device:
    // p + (-step_size)·(m / denominator).
    const std::vector<at::Tensor> g = o.weight_decay() != 0 ? at::_foreach_add(grads, params, o.weight_decay()) : grads;
    at::_foreach_mul_(m, beta1);
    at::_foreach_add_(m, g, 1 - beta1);
    at::_foreach_mul_(v, beta2);
    at::_foreach_addcmul_(v, g, g, 1 - beta2);
    const std::vector<at::Tensor> denominator = at::_foreach_sqrt(v);
    compat::foreach_mul_by_tensor_(denominator, inv_sqrt_bc2);
    at::_foreach_add_(denominator, o.eps());
    const std::vector<at::Tensor> change = at::_foreach_div(m, denominator);
    compat::foreach_mul_by_tensor_(change, step_size);
    at::_foreach_sub_(params, change);
    if (!avgs.empty()) {
      const std::vector<at::Tensor> towards = at::_foreach_sub(params, avgs);
      compat::foreach_mul_by_tensor_(towards, avg_weight);
      at::_foreach_add_(avgs, towards);
    }
    ++group_index;
  }
}

void adam_step(torch::optim::Adam& optimizer, Ema* ema, bool tensor_ops) {
  torch::NoGradGuard no_grad;
  const double avg_weight = ema != nullptr ? 1 - ema->next_decay() : 0.0;
  const std::vector<size_t> order = ema != nullptr ? averages_in_order(optimizer, *ema) : std::vector<size_t>{};
  size_t index = 0;
  for (auto& group : optimizer.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamOptions&>(group.options());
    if (o.amsgrad()) throw Error("adam_step: amsgrad is not supported");
    const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
    TensorOpsGroup listed;  // the group's parameters that take the tensor operations
    for (auto& p : group.params()) {
      const size_t k = index++;
      if (!p.grad().defined()) {  // Adam leaves it; its average still moves towards it
        if (ema != nullptr) ema->update_one(order[k], avg_weight);
        continue;
      }
      const at::Tensor avg = ema != nullptr ? ema->averages()[order[k]] : at::Tensor();
      auto& st = state_of(optimizer, p);
      st.step(st.step() + 1);
      const double bc1 = 1 - std::pow(beta1, double(st.step())), bc2 = 1 - std::pow(beta2, double(st.step()));
      const at::Tensor grad = p.grad().is_contiguous() ? p.grad() : p.grad().contiguous();
      if (!p.is_contiguous() || !st.exp_avg().is_contiguous() || !st.exp_avg_sq().is_contiguous())
        throw Error("adam_step: parameters and their state must be contiguous");
      if (tensor_ops || !p.device().is_cpu()) {
        listed.params.push_back(p);
        listed.grads.push_back(grad);
        listed.exp_avgs.push_back(st.exp_avg());
        listed.exp_avg_sqs.push_back(st.exp_avg_sq());
        if (avg.defined()) listed.avgs.push_back(avg);
        listed.neg_step_sizes.emplace_back(-o.lr() / bc1);
        listed.inv_sqrt_bc2s.emplace_back(1 / std::sqrt(bc2));
      } else if (p.scalar_type() == at::kDouble) {
        update<double>(p.data_ptr<double>(), grad.data_ptr<double>(), st.exp_avg().data_ptr<double>(),
                       st.exp_avg_sq().data_ptr<double>(), p.numel(), beta1, beta2, o.weight_decay(), o.lr() / bc1,
                       1 / std::sqrt(bc2), o.eps(), avg.defined() ? avg.data_ptr<double>() : nullptr, avg_weight);
      } else if (p.scalar_type() == at::kFloat) {
        update<float>(p.data_ptr<float>(), grad.data_ptr<float>(), st.exp_avg().data_ptr<float>(),
                      st.exp_avg_sq().data_ptr<float>(), p.numel(), beta1, beta2, o.weight_decay(), o.lr() / bc1,
                      1 / std::sqrt(bc2), o.eps(), avg.defined() ? avg.data_ptr<float>() : nullptr, avg_weight);
      } else {
        throw Error("adam_step: float32 or float64 parameters expected");
      }
    }
    update_with_tensor_ops(listed, beta1, beta2, o.weight_decay(), o.eps(), avg_weight);
  }
  if (ema != nullptr) ema->advance();
}

}  // namespace mlip::train
