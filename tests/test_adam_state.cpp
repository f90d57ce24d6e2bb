// The Adam state of checkpoints (train/adam_state.h): a round trip, archives written by
// LibTorch's own torch::save(optimizer) (what earlier mlip versions stored), and refused archives.
#include "train/adam_state.h"

#include <gtest/gtest.h>
#include <torch/serialize.h>

#include <sstream>
#include <vector>

#include "compat/libtorch.h"
#include "error.h"
#include "train/adam_step.h"

namespace {

template <typename Real>
class AdamState : public ::testing::Test {};
using Reals = ::testing::Types<float, double>;
TYPED_TEST_SUITE(AdamState, Reals);

template <typename Real>
torch::Dtype dtype_of() {
  return std::is_same_v<Real, float> ? torch::kFloat32 : torch::kFloat64;
}

std::vector<torch::Tensor> make_params(torch::Dtype dtype, std::vector<std::vector<int64_t>> shapes = {{5, 3}, {3}, {2, 2}}) {
  torch::manual_seed(7);
  std::vector<torch::Tensor> ps;
  for (const auto& shape : shapes) ps.push_back(torch::randn(shape, torch::kFloat64).to(dtype).requires_grad_());
  return ps;
}

/// `steps` Adam steps with gradients that differ per step; parameter `skip` gets none (no state).
void train(torch::optim::Adam& adam, std::vector<torch::Tensor>& ps, int steps, size_t skip = size_t(-1)) {
  for (int s = 0; s < steps; ++s) {
    for (size_t k = 0; k < ps.size(); ++k)
      ps[k].mutable_grad() = k == skip ? torch::Tensor()
                                       : torch::cos(torch::arange(ps[k].numel(), torch::kFloat64) * (0.3 + 0.2 * s + k))
                                             .reshape(ps[k].sizes())
                                             .to(ps[k].scalar_type());
    mlip::train::adam_step(adam);
  }
}

/// Every parameter's state in `a` equals (bit for bit) the one in `b`; parameters without a state in both.
void expect_same_state(torch::optim::Adam& a, const std::vector<torch::Tensor>& pa, torch::optim::Adam& b,
                       const std::vector<torch::Tensor>& pb) {
  ASSERT_EQ(a.state().size(), b.state().size());
  for (size_t k = 0; k < pa.size(); ++k) {
    const auto ia = a.state().find(mlip::compat::optimizer_state_key(pa[k]));
    const auto ib = b.state().find(mlip::compat::optimizer_state_key(pb[k]));
    ASSERT_EQ(ia == a.state().end(), ib == b.state().end()) << "parameter " << k;
    if (ia == a.state().end()) continue;
    const auto& sa = static_cast<const torch::optim::AdamParamState&>(*ia->second);
    const auto& sb = static_cast<const torch::optim::AdamParamState&>(*ib->second);
    EXPECT_EQ(sa.step(), sb.step()) << "parameter " << k;
    EXPECT_TRUE(torch::equal(sa.exp_avg(), sb.exp_avg())) << "parameter " << k;
    EXPECT_TRUE(torch::equal(sa.exp_avg_sq(), sb.exp_avg_sq())) << "parameter " << k;
  }
}

TYPED_TEST(AdamState, RoundTripContinuesTheSameUpdates) {
  const auto dtype = dtype_of<TypeParam>();
  std::vector<torch::Tensor> a = make_params(dtype), b = make_params(dtype);
  torch::optim::Adam adam_a(a, torch::optim::AdamOptions(1e-2)), adam_b(b, torch::optim::AdamOptions(1e-2));
  train(adam_a, a, 4, /*skip=*/1);
  const std::string bytes = mlip::train::save_adam_state(adam_a);
  for (size_t k = 0; k < a.size(); ++k) b[k].detach().copy_(a[k]);
  mlip::train::load_adam_state(adam_b, bytes, c10::Device(c10::kCPU), "ckpt.pt");
  expect_same_state(adam_a, a, adam_b, b);
  train(adam_a, a, 3);
  train(adam_b, b, 3);
  for (size_t k = 0; k < a.size(); ++k) EXPECT_TRUE(torch::equal(a[k], b[k])) << "parameter " << k;
}

TYPED_TEST(AdamState, ReadsLibTorchsOwnOptimizerArchive) {
  // torch::save(optimizer) keys the state by the parameters' addresses (hexadecimal in 1.13).
  const auto dtype = dtype_of<TypeParam>();
  std::vector<torch::Tensor> a = make_params(dtype), b = make_params(dtype);
  torch::optim::Adam adam_a(a, torch::optim::AdamOptions(1e-2)), adam_b(b, torch::optim::AdamOptions(1e-2));
  train(adam_a, a, 3);
  std::ostringstream out;
  torch::save(adam_a, out);
  mlip::train::load_adam_state(adam_b, out.str(), c10::Device(c10::kCPU), "old.pt");
  expect_same_state(adam_a, a, adam_b, b);
}

TEST(AdamState, RefusesAnArchiveOfAnotherModel) {
  std::vector<torch::Tensor> a = make_params(torch::kFloat64);
  torch::optim::Adam adam_a(a, torch::optim::AdamOptions(1e-2));
  train(adam_a, a, 2);
  const std::string bytes = mlip::train::save_adam_state(adam_a);
  const auto message = [&](std::vector<torch::Tensor> ps) {
    torch::optim::Adam adam(ps, torch::optim::AdamOptions(1e-2));
    try {
      mlip::train::load_adam_state(adam, bytes, c10::Device(c10::kCPU), "other.pt");
    } catch (const mlip::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(make_params(torch::kFloat64, {{5, 3}, {3}})),
            "other.pt: optimizer state has 3 parameters in group 0, the model 2");
  EXPECT_EQ(message(make_params(torch::kFloat64, {{5, 3}, {4}, {2, 2}})),
            "other.pt: optimizer state: exp_avg is a Double tensor of shape [3], but its parameter is a Double tensor "
            "of shape [4]");
  EXPECT_EQ(message(make_params(torch::kFloat32)).rfind("other.pt: optimizer state: exp_avg is a Double tensor", 0), 0u);
  std::vector<torch::Tensor> ps = make_params(torch::kFloat64);
  torch::optim::Adam adam(ps, torch::optim::AdamOptions(1e-2));
  EXPECT_THROW(mlip::train::load_adam_state(adam, "not an archive", c10::Device(c10::kCPU), "bad.pt"), mlip::Error);
}

}  // namespace
