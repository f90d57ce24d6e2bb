// models::radial_mlp against the same MLP by plain autograd: values and the gradient by the
// basis, float32 and float64; a second derivative and trainable weights are refused.
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/script.h>

#include "models/equivariant/radial_mlp.h"
#include "test_util.h"

namespace {

template <typename T>
struct RadialMlpTest : ::testing::Test {
  static torch::Dtype dtype() { return std::is_same_v<T, float> ? torch::kFloat32 : torch::kFloat64; }
  static double tolerance() { return std::is_same_v<T, float> ? 1e-6 : 1e-14; }
};
using Reals = ::testing::Types<float, double>;
TYPED_TEST_SUITE(RadialMlpTest, Reals);

/// The model's radial MLP as its source writes it (models/equivariant/equivariant.cpp).
torch::Tensor plain(const torch::Tensor& basis, const std::vector<torch::Tensor>& hidden, const torch::Tensor& output,
                    const std::vector<double>& divisors, double output_divisor) {
  torch::Tensor h = basis;
  for (size_t k = 0; k < hidden.size(); ++k) {
    h = torch::matmul(h, hidden[k]) / divisors[k];
    h = h * torch::sigmoid(h);
  }
  return torch::matmul(h, output) / output_divisor;
}

TYPED_TEST(RadialMlpTest, EqualsThePlainMlpAndItsGradient) {
  torch::manual_seed(3);
  const auto opts = torch::TensorOptions().dtype(TestFixture::dtype());
  const std::vector<torch::Tensor> hidden = {torch::randn({8, 16}, opts), torch::randn({16, 16}, opts)};
  const torch::Tensor output = torch::randn({16, 40}, opts);
  const std::vector<double> divisors = {std::sqrt(8.0), 4.0};
  const torch::Tensor basis = torch::randn({50, 8}, opts).requires_grad_(true);
  const torch::Tensor seed = torch::randn({50, 40}, opts);

  const torch::Tensor a = mlip::models::radial_mlp(basis, hidden, output, divisors, 4.0);
  const torch::Tensor b = plain(basis, hidden, output, divisors, 4.0);
  const double scale = b.abs().max().item<double>();
  EXPECT_LT((a - b).abs().max().item<double>(), TestFixture::tolerance() * scale);
  const auto ga = torch::autograd::grad({a}, {basis}, {seed})[0];
  const auto gb = torch::autograd::grad({b}, {basis}, {seed})[0];
  EXPECT_LT((ga - gb).abs().max().item<double>(), TestFixture::tolerance() * gb.abs().max().item<double>());
  EXPECT_GT(gb.abs().max().item<double>(), 1e-3) << "a gradient that can differ";
}

TEST(RadialMlp, RefusesSecondDerivativesAndTrainableWeights) {
  const std::vector<torch::Tensor> hidden = {torch::randn({4, 6}, torch::kFloat64)};
  const torch::Tensor output = torch::randn({6, 3}, torch::kFloat64);
  const torch::Tensor basis = torch::randn({5, 4}, torch::kFloat64).requires_grad_(true);
  const torch::Tensor w = mlip::models::radial_mlp(basis, hidden, output, {2.0}, 3.0);
  EXPECT_TRUE(mlip::test::contains(
      mlip::test::error_of([&] { torch::autograd::grad({w.sum()}, {basis}, {}, true, true); }),
      "first derivatives only"));
  const torch::Tensor trainable = output.clone().requires_grad_(true);
  EXPECT_TRUE(mlip::test::contains(
      mlip::test::error_of([&] { mlip::models::radial_mlp(basis, hidden, trainable, {2.0}, 3.0); }),
      "must not require a gradient"));
}

}  // namespace
