#include "train/non_finite_guard.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "error.h"

namespace mlip::train {

namespace {

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Inf" : "-Inf";
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

NonFiniteGuard::NonFiniteGuard(bool on_host) : on_host_(on_host) {}

void NonFiniteGuard::fail(const std::string& what, int64_t step) const {
  std::ostringstream m;
  m << "step " << step << ": " << what << "; training stopped before writing non-finite weights: "
    << (newest_checkpoint_.empty() ? std::string("this run wrote no checkpoint")
                                   : "the newest checkpoint, " + newest_checkpoint_ + ", holds the last finite ones")
    << ". Causes: a learning rate too large (learning_rate.start_lr), or frames unlike the others (mlip test -m "
       "<checkpoint> on the data names frames whose prediction is not finite)";
  throw Error(m.str());
}

void NonFiniteGuard::after_loss(const torch::Tensor& loss, int64_t step,
                                const std::function<std::string()>& batch) {
  if (on_host_) {
    const double value = loss.reshape({-1})[0].item<double>();
    if (!std::isfinite(value)) {
      std::ostringstream what;
      what << "the training loss is " << number(value) << " on " << batch();
      fail(what.str(), step);
    }
    return;
  }
  // On the device: first_bad = min(first_bad, finite ? INT64_MAX : step), no host read.
  const auto options = torch::TensorOptions().dtype(torch::kInt64).device(loss.device());
  if (!first_bad_step_.defined()) first_bad_step_ = torch::full({1}, std::numeric_limits<int64_t>::max(), options);
  const auto this_step = torch::where(torch::isfinite(loss.reshape({-1}).narrow(0, 0, 1)),
                                      torch::full({1}, std::numeric_limits<int64_t>::max(), options),
                                      torch::full({1}, step, options));
  first_bad_step_ = torch::minimum(first_bad_step_, this_step);
}

void NonFiniteGuard::after_validation(double loss, int64_t step) const {
  if (std::isfinite(loss)) return;
  std::ostringstream what;
  what << "the validation loss is " << number(loss) << " (the training loss was finite)";
  fail(what.str(), step);
}

void NonFiniteGuard::check_pending() {
  for (const torch::Tensor* record : {&first_bad_step_, &watched_}) {
    if (!record->defined()) continue;
    const int64_t step = record->to(torch::kCPU).item<int64_t>();
    if (step != std::numeric_limits<int64_t>::max()) fail("the training loss is not finite (NaN or Inf)", step);
  }
}

void NonFiniteGuard::check_parameters(const std::vector<torch::Tensor>& parameters, int64_t step) const {
  for (size_t k = 0; k < parameters.size(); ++k) {
    const torch::Tensor& p = parameters[k];
    if (!p.defined() || p.numel() == 0) continue;
    if (!torch::isfinite(p.detach()).all().item<bool>()) {
      std::ostringstream what;
      what << "parameter " << k << " of " << parameters.size() << " (shape " << p.sizes()
           << ") holds NaN or Inf after the optimiser's step";
      fail(what.str(), step);
    }
  }
}

}  // namespace mlip::train
