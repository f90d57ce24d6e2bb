#include "train/adam_step.h"

#include "compat/libtorch.h"
#include "train/operation_counter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "test_util.h"

namespace {

template <typename Real>
class AdamStep : public ::testing::Test {};
using Reals = ::testing::Types<float, double>;
TYPED_TEST_SUITE(AdamStep, Reals);

/// Parameters of a few shapes with gradients that change from step to step.
std::vector<torch::Tensor> make_params(torch::Dtype dtype) {
  torch::manual_seed(3);
  std::vector<torch::Tensor> ps;
  for (auto shape : {std::vector<int64_t>{1600, 24}, {240}, {7, 3}, {1}})
    ps.push_back(torch::randn(shape, torch::kFloat64).to(dtype).requires_grad_());
  return ps;
}

void set_grads(std::vector<torch::Tensor>& ps, int step) {
  for (size_t k = 0; k < ps.size(); ++k) {
    auto g = torch::sin(torch::arange(ps[k].numel(), torch::kFloat64) * (0.37 + 0.11 * step + 0.05 * k))
                 .reshape(ps[k].sizes()) * (1e-3 * (step + 1));
    ps[k].mutable_grad() = g.to(ps[k].scalar_type());
  }
}

TYPED_TEST(AdamStep, SameUpdatesAndStateAsLibTorchAdam) {
  const auto dtype = std::is_same_v<TypeParam, float> ? torch::kFloat32 : torch::kFloat64;
  const double tol = std::is_same_v<TypeParam, float> ? 2e-6 : 1e-14;
  std::vector<torch::Tensor> a = make_params(dtype), b = make_params(dtype);
  const auto options = torch::optim::AdamOptions(1e-3).betas({0.9, 0.999}).weight_decay(0.0);
  torch::optim::Adam reference(a, options), fused(b, options);
  for (int step = 0; step < 6; ++step) {
    // Alternate who steps first through the reference: the fused step must continue LibTorch's
    // state (same keys, same step count), and LibTorch must continue the fused one's.
    for (auto* ps : {&a, &b}) set_grads(*ps, step);
    reference.step();
    if (step == 2) fused.step();  // LibTorch's step on the second set, then fused ones again
    else mlip::train::adam_step(fused);
    for (size_t k = 0; k < a.size(); ++k) {
      const double scale = a[k].abs().max().item<double>();
      EXPECT_LE((a[k] - b[k]).abs().max().item<double>(), tol * scale) << "step " << step << " param " << k;
    }
  }
  ASSERT_EQ(fused.state().size(), a.size());
  for (auto& p : b) {
    const auto& st = static_cast<torch::optim::AdamParamState&>(
        *fused.state().at(mlip::compat::optimizer_state_key(p)));
    EXPECT_EQ(st.step(), 6);
  }
  // The parameters really moved.
  std::vector<torch::Tensor> fresh = make_params(dtype);
  EXPECT_GT((b[0] - fresh[0]).abs().max().item<double>(), 1e-3);
}

TYPED_TEST(AdamStep, TensorOperationsEqualTheFusedLoopWithTheAverage) {
  // The update that parameters on a GPU take (tensor operations), on the CPU against the fused
  // loop, with the moving average fused in both.
  const auto dtype = std::is_same_v<TypeParam, float> ? torch::kFloat32 : torch::kFloat64;
  const double tol = std::is_same_v<TypeParam, float> ? 2e-6 : 1e-14;
  std::vector<torch::Tensor> a = make_params(dtype), b = make_params(dtype);
  const auto options = torch::optim::AdamOptions(1e-3).betas({0.9, 0.999}).weight_decay(0.0);
  torch::optim::Adam fused(a, options), tensor_ops(b, options);
  mlip::train::Ema ema_a(a, 0.9), ema_b(b, 0.9);
  for (int step = 0; step < 6; ++step) {
    for (auto* ps : {&a, &b}) set_grads(*ps, step);
    mlip::train::adam_step(fused, &ema_a);
    mlip::train::adam_step(tensor_ops, &ema_b, true);
    for (size_t k = 0; k < a.size(); ++k) {
      const double scale = a[k].abs().max().item<double>();
      EXPECT_LE((a[k] - b[k]).abs().max().item<double>(), tol * scale) << "step " << step << " param " << k;
      EXPECT_LE((ema_a.averages()[k] - ema_b.averages()[k]).abs().max().item<double>(), tol * scale)
          << "average, step " << step << " param " << k;
    }
  }
  EXPECT_EQ(ema_a.updates(), ema_b.updates());
  std::vector<torch::Tensor> fresh = make_params(dtype);
  EXPECT_GT((b[0] - fresh[0]).abs().max().item<double>(), 1e-3);
  EXPECT_GT((ema_b.averages()[0] - fresh[0]).abs().max().item<double>(), 1e-4);
}


/// Operator calls of one update of `copies` copies of make_params' parameters, with weight decay
/// and the moving average, after a first step that makes the state: adam_step's tensor
/// operations, or (`replayable`) advance_adam + adam_update_from, the static step's form.
int64_t update_operators(torch::Dtype dtype, int copies, bool replayable) {
  std::vector<torch::Tensor> ps;
  for (int c = 0; c < copies; ++c)
    for (auto& p : make_params(dtype)) ps.push_back(p);
  torch::optim::Adam adam(ps, torch::optim::AdamOptions(1e-3).weight_decay(1e-4));
  mlip::train::Ema ema(ps, 0.9);
  set_grads(ps, 0);
  mlip::train::adam_step(adam, &ema, true);  // the first step makes the state
  set_grads(ps, 1);
  const auto scalars = torch::tensor(mlip::train::advance_adam(adam, &ema), torch::kFloat64);
  mlip::train::OperationCounter counter;
  if (replayable) mlip::train::adam_update_from(adam, &ema, scalars);
  else mlip::train::adam_step(adam, &ema, true);
  return counter.counts().operators;
}

TYPED_TEST(AdamStep, TensorOperationsAreAFewForAWholeGroup) {
  // A GPU's update launches the same operations for 4 parameters as for 40 (multi-tensor
  // operations).
  const auto dtype = std::is_same_v<TypeParam, float> ? torch::kFloat32 : torch::kFloat64;
  const int64_t few = update_operators(dtype, 1, false), many = update_operators(dtype, 10, false);
  EXPECT_GT(few, 0);
  EXPECT_LE(few, 12);
  EXPECT_EQ(many, few);
}

TYPED_TEST(AdamStep, TheReplayableUpdateIsAFewOperationsForAWholeGroup) {
  // adam_update_from (the step from static buffers, what a CUDA graph captures) the same, except
  // where LibTorch's multi-tensor product takes no tensor scalar (1.13: three products per
  // parameter instead).
  const auto dtype = std::is_same_v<TypeParam, float> ? torch::kFloat32 : torch::kFloat64;
  const int64_t few = update_operators(dtype, 1, true), many = update_operators(dtype, 10, true);
  const int64_t params = int64_t(make_params(dtype).size());
  const bool one_call = mlip::compat::kForeachMulTakesATensor;
  EXPECT_GT(few, 0);
  EXPECT_LE(few, 20 + (one_call ? 0 : 3 * params));
  EXPECT_EQ(many, few + (one_call ? 0 : 3 * 9 * params));
}

TYPED_TEST(AdamStep, TwoHalvesWithScalarsInATensorEqualTheStep) {
  // The replayable form (advance_adam on the host, adam_update_from reading one scalar tensor
  // that is refilled in place, as a captured graph's buffer) against adam_step's tensor
  // operations, with a learning rate that changes every step, weight decay and the average.
  const auto dtype = std::is_same_v<TypeParam, float> ? torch::kFloat32 : torch::kFloat64;
  const double tol = std::is_same_v<TypeParam, float> ? 2e-6 : 1e-14;
  std::vector<torch::Tensor> a = make_params(dtype), b = make_params(dtype);
  const auto options = torch::optim::AdamOptions(1e-3).betas({0.9, 0.999}).weight_decay(1e-4);
  torch::optim::Adam direct(a, options), halves(b, options);
  mlip::train::Ema ema_a(a, 0.9), ema_b(b, 0.9);
  const auto scalars = torch::zeros({3}, torch::kFloat64);
  const auto before = scalars.data_ptr<double>();
  for (int step = 0; step < 6; ++step) {
    const double lr = 1e-3 * std::pow(0.7, step);
    for (auto* o : {&direct, &halves})
      static_cast<torch::optim::AdamOptions&>(o->param_groups()[0].options()).lr(lr);
    for (auto* ps : {&a, &b}) set_grads(*ps, step);
    mlip::train::adam_step(direct, &ema_a, true);
    const std::vector<double> values = mlip::train::advance_adam(halves, &ema_b);
    ASSERT_EQ(values.size(), 3u);
    EXPECT_NEAR(values[0], lr / (1 - std::pow(0.9, step + 1)), 1e-15);
    scalars.copy_(torch::tensor(values, torch::kFloat64));
    mlip::train::adam_update_from(halves, &ema_b, scalars);
    for (size_t k = 0; k < a.size(); ++k) {
      const double scale = a[k].abs().max().item<double>();
      EXPECT_LE((a[k] - b[k]).abs().max().item<double>(), tol * scale) << "step " << step << " param " << k;
      EXPECT_LE((ema_a.averages()[k] - ema_b.averages()[k]).abs().max().item<double>(), tol * scale)
          << "average, step " << step << " param " << k;
    }
  }
  EXPECT_EQ(scalars.data_ptr<double>(), before) << "the buffer stays where it was";
  EXPECT_EQ(ema_a.updates(), ema_b.updates());
  for (auto& p : b) {
    const auto& st = static_cast<torch::optim::AdamParamState&>(
        *halves.state().at(mlip::compat::optimizer_state_key(p)));
    EXPECT_EQ(st.step(), 6);
  }
  std::vector<torch::Tensor> fresh = make_params(dtype);
  EXPECT_GT((b[0] - fresh[0]).abs().max().item<double>(), 1e-3);
}

TEST(AdamStepHalves, MissingGradientsAndWrongScalarsAreErrors) {
  std::vector<torch::Tensor> ps = make_params(torch::kFloat64);
  torch::optim::Adam adam(ps, torch::optim::AdamOptions(1e-3));
  const std::string no_grad = mlip::test::error_of([&] { mlip::train::advance_adam(adam); });
  EXPECT_NE(no_grad.find("every parameter needs a gradient"), std::string::npos) << no_grad;
  set_grads(ps, 0);
  EXPECT_EQ(mlip::train::advance_adam(adam).size(), 3u);
  const std::string wrong =
      mlip::test::error_of([&] { mlip::train::adam_update_from(adam, nullptr, torch::zeros({5}, torch::kFloat64)); });
  EXPECT_NE(wrong.find("expected 3 scalars"), std::string::npos) << wrong;
}

}  // namespace
