#include "train/ema.h"

#include <gtest/gtest.h>
#include <torch/optim/adam.h>

#include <algorithm>
#include <vector>

#include "error.h"
#include "train/adam_step.h"

namespace {

template <typename Real>
class EmaTest : public ::testing::Test {
 protected:
  static constexpr torch::Dtype kDtype = std::is_same_v<Real, float> ? torch::kFloat32 : torch::kFloat64;
  static constexpr double kTol = std::is_same_v<Real, float> ? 2e-6 : 1e-14;
};
using Reals = ::testing::Types<float, double>;
TYPED_TEST_SUITE(EmaTest, Reals);

std::vector<torch::Tensor> make_params(torch::Dtype dtype) {
  torch::manual_seed(5);
  std::vector<torch::Tensor> ps;
  for (auto shape : {std::vector<int64_t>{300, 7}, {240}, {1}})
    ps.push_back(torch::randn(shape, torch::kFloat64).to(dtype).requires_grad_());
  return ps;
}

double max_abs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

/// Moves the parameters as an optimiser would (in place, so an Ema sharing them sees it).
void move(std::vector<torch::Tensor>& ps, int step) {
  torch::NoGradGuard no_grad;
  for (size_t k = 0; k < ps.size(); ++k)
    ps[k].add_(torch::cos(torch::arange(ps[k].numel(), torch::kFloat64) * (0.3 + 0.07 * step + 0.1 * k))
                   .reshape(ps[k].sizes())
                   .to(ps[k].scalar_type()),
               0.01);
}

TEST(EmaDecay, WarmsUpAsNumUpdatesThenStaysAtDecay) {
  torch::Tensor p = torch::zeros({2}, torch::kFloat64);
  mlip::train::Ema ema({p}, 0.99);
  EXPECT_DOUBLE_EQ(ema.next_decay(), 2.0 / 11.0);  // (1 + n) / (10 + n) for n = 1
  for (int n = 1; n <= 2000; ++n) {
    EXPECT_DOUBLE_EQ(ema.next_decay(), std::min(0.99, (1.0 + n) / (10.0 + n))) << n;
    ema.update();
  }
  EXPECT_EQ(ema.updates(), 2000);
  EXPECT_DOUBLE_EQ(ema.next_decay(), 0.99);
}

TYPED_TEST(EmaTest, UpdateFollowsTheRecursionFromTheStartWeights) {
  auto ps = make_params(TestFixture::kDtype);
  mlip::train::Ema ema(ps, 0.9);
  // The reference: the recursion in float64 on copies.
  std::vector<torch::Tensor> ref;
  for (auto& p : ps) ref.push_back(p.detach().to(torch::kFloat64).clone());
  for (int step = 0; step < 40; ++step) {
    move(ps, step);
    const double n = step + 1, d = std::min(0.9, (1 + n) / (10 + n));
    for (size_t k = 0; k < ps.size(); ++k) ref[k] = d * ref[k] + (1 - d) * ps[k].detach().to(torch::kFloat64);
    ema.update();
  }
  for (size_t k = 0; k < ps.size(); ++k) {
    EXPECT_EQ(ema.averages()[k].scalar_type(), TestFixture::kDtype);
    const double scale = max_abs(ref[k]);
    EXPECT_LE(max_abs(ema.averages()[k].to(torch::kFloat64) - ref[k]), 50 * TestFixture::kTol * scale);
    // The average lags behind: it is not the current weights.
    EXPECT_GT(max_abs(ema.averages()[k] - ps[k]), 1e-3);
  }
}

TYPED_TEST(EmaTest, SwapExchangesInPlaceAndTwiceRestores) {
  auto ps = make_params(TestFixture::kDtype);
  mlip::train::Ema ema(ps, 0.99);
  move(ps, 0);
  ema.update();
  move(ps, 1);
  const void* storage = ps[0].data_ptr();
  std::vector<torch::Tensor> raw, avg;
  for (size_t k = 0; k < ps.size(); ++k) raw.push_back(ps[k].detach().clone()), avg.push_back(ema.averages()[k].clone());
  ema.swap();
  EXPECT_EQ(ps[0].data_ptr(), storage) << "the parameter keeps its storage";
  for (size_t k = 0; k < ps.size(); ++k) {
    EXPECT_TRUE(torch::equal(ps[k].detach(), avg[k]));
    EXPECT_TRUE(torch::equal(ema.averages()[k], raw[k]));
  }
  ema.swap();
  for (size_t k = 0; k < ps.size(); ++k) {
    EXPECT_TRUE(torch::equal(ps[k].detach(), raw[k]));
    EXPECT_TRUE(torch::equal(ema.averages()[k], avg[k]));
  }
  ema.reset(7);
  EXPECT_EQ(ema.updates(), 7);
  for (size_t k = 0; k < ps.size(); ++k) EXPECT_TRUE(torch::equal(ema.averages()[k], raw[k]));
}

TYPED_TEST(EmaTest, AdamStepFusesTheSameUpdate) {
  // adam_step with an Ema gives the parameters of adam_step without one, and the averages of
  // Ema::update after it; a parameter without a gradient keeps still and is still averaged.
  std::vector<torch::Tensor> a = make_params(TestFixture::kDtype), b = make_params(TestFixture::kDtype);
  const auto options = torch::optim::AdamOptions(1e-2).betas({0.9, 0.999}).weight_decay(0.0);
  torch::optim::Adam opt_a(a, options), opt_b(b, options);
  mlip::train::Ema ema_a(a, 0.95), ema_b(b, 0.95);
  for (int step = 0; step < 30; ++step) {
    for (auto* ps : {&a, &b})
      for (size_t k = 0; k + 1 < ps->size(); ++k)  // the last parameter gets no gradient
        (*ps)[k].mutable_grad() = torch::sin(torch::arange((*ps)[k].numel(), torch::kFloat64) * (0.2 + 0.1 * step))
                                      .reshape((*ps)[k].sizes())
                                      .to(TestFixture::kDtype);
    if (step == 10) {  // the last parameter moves by other means once
      torch::NoGradGuard no_grad;
      a.back().add_(1.0), b.back().add_(1.0);
    }
    mlip::train::adam_step(opt_a);
    ema_a.update();
    mlip::train::adam_step(opt_b, &ema_b);
  }
  EXPECT_EQ(ema_b.updates(), 30);
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_TRUE(torch::equal(a[k], b[k])) << k;
    const double scale = max_abs(ema_a.averages()[k]);
    EXPECT_LE(max_abs(ema_a.averages()[k] - ema_b.averages()[k]), 4 * TestFixture::kTol * scale)
        << k;
  }
  // The unmoved-by-Adam parameter's average moved towards its jump.
  EXPECT_GT(max_abs(ema_b.averages().back() - make_params(TestFixture::kDtype).back()), 0.5);
}

TEST(EmaErrors, DecayOutsideTheOpenIntervalAndForeignParameters) {
  torch::Tensor p = torch::zeros({3}, torch::kFloat64).requires_grad_();
  EXPECT_THROW(mlip::train::Ema({p}, 1.0), mlip::Error);
  EXPECT_THROW(mlip::train::Ema({p}, 0.0), mlip::Error);
  EXPECT_THROW(mlip::train::Ema({torch::zeros({3}, torch::kInt64)}, 0.5), mlip::Error);
  // An average of other tensors than the optimiser's: a clear error, not a wrong update.
  torch::Tensor q = torch::zeros({3}, torch::kFloat64).requires_grad_();
  torch::optim::Adam opt({p}, torch::optim::AdamOptions(1e-3));
  mlip::train::Ema other({q}, 0.5);
  p.mutable_grad() = torch::ones({3}, torch::kFloat64);
  EXPECT_THROW(mlip::train::adam_step(opt, &other), mlip::Error);
  mlip::train::Ema more({p, q}, 0.5);  // one more than the optimiser has
  EXPECT_THROW(mlip::train::adam_step(opt, &more), mlip::Error);
  EXPECT_TRUE(torch::equal(p, torch::zeros({3}, torch::kFloat64))) << "nothing is updated before the error";
}

}  // namespace
