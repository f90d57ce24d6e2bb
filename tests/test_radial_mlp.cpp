// models::radial_mlp against the same MLP by plain autograd: values and the gradient by the
// basis, float32 and float64; a second derivative and trainable weights are refused.
// models::radial_mlp_training likewise to second order (the force loss's gradient by the weights,
// the basis and the incoming gradient); a third derivative is refused.
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

/// The quantities of a training step through an MLP `mlp` of the basis: the energy-like
/// ⟨w, c⟩ with c a leaf (the downstream gradient depends on other weights), its gradient by the
/// basis kept as a graph (the forces), and a loss of both differentiated by everything.
template <typename Mlp>
std::vector<torch::Tensor> second_order(Mlp mlp, const torch::Tensor& basis0, const std::vector<torch::Tensor>& hidden0,
                                        const torch::Tensor& output0, const torch::Tensor& c0, const torch::Tensor& v,
                                        const torch::Tensor& q) {
  const auto basis = basis0.clone().requires_grad_(true), c = c0.clone().requires_grad_(true);
  const auto output = output0.clone().requires_grad_(true);
  std::vector<torch::Tensor> hidden;
  for (const auto& h : hidden0) hidden.push_back(h.clone().requires_grad_(true));
  const auto w = mlp(basis, hidden, output);
  const auto by_basis = torch::autograd::grad({(w * c).sum()}, {basis}, {}, true, true)[0];
  const auto loss = (by_basis * v).sum() + (w * q).sum();
  std::vector<torch::Tensor> inputs = {basis, c, output};
  inputs.insert(inputs.end(), hidden.begin(), hidden.end());
  auto out = torch::autograd::grad({loss}, inputs);
  out.push_back(w.detach());
  out.push_back(by_basis.detach());
  return out;
}

TYPED_TEST(RadialMlpTest, TrainingVariantEqualsThePlainMlpToSecondOrder) {
  torch::manual_seed(5);
  const auto opts = torch::TensorOptions().dtype(TestFixture::dtype());
  for (int depth : {1, 2, 3}) {
    SCOPED_TRACE("hidden layers: " + std::to_string(depth));
    std::vector<torch::Tensor> hidden = {torch::randn({8, 16}, opts)};
    std::vector<double> divisors = {std::sqrt(8.0)};
    for (int k = 1; k < depth; ++k) hidden.push_back(torch::randn({16, 16}, opts)), divisors.push_back(4.0);
    const torch::Tensor output = torch::randn({16, 40}, opts), basis = torch::randn({50, 8}, opts);
    const torch::Tensor c = torch::randn({50, 40}, opts), v = torch::randn({50, 8}, opts),
                        q = torch::randn({50, 40}, opts);
    const std::vector<torch::Tensor> fused = second_order(
        [&](const torch::Tensor& b, const std::vector<torch::Tensor>& h, const torch::Tensor& o) {
          return mlip::models::radial_mlp_training(b, h, o, divisors, 4.0);
        },
        basis, hidden, output, c, v, q);
    const std::vector<torch::Tensor> reference = second_order(
        [&](const torch::Tensor& b, const std::vector<torch::Tensor>& h, const torch::Tensor& o) {
          return plain(b, h, o, divisors, 4.0);
        },
        basis, hidden, output, c, v, q);
    const char* names[] = {"d/d basis", "d/d c", "d/d output weights", "d/d hidden 0", "d/d hidden 1",
                           "d/d hidden 2"};
    ASSERT_EQ(fused.size(), reference.size());
    for (size_t k = 0; k < fused.size(); ++k) {
      const std::string name = k + 2 < fused.size() ? names[k] : (k + 2 == fused.size() ? "value" : "gradient");
      const double scale = reference[k].abs().max().item<double>();
      EXPECT_GT(scale, 1e-3) << name << ": a quantity that can differ";
      EXPECT_LT((fused[k] - reference[k]).abs().max().item<double>(), 10 * TestFixture::tolerance() * scale) << name;
    }
  }
}

TEST(RadialMlp, TrainingVariantRefusesAThirdDerivative) {
  const std::vector<torch::Tensor> hidden = {torch::randn({4, 6}, torch::kFloat64).requires_grad_(true)};
  const torch::Tensor output = torch::randn({6, 3}, torch::kFloat64).requires_grad_(true);
  const torch::Tensor basis = torch::randn({5, 4}, torch::kFloat64).requires_grad_(true);
  const torch::Tensor w = mlip::models::radial_mlp_training(basis, hidden, output, {2.0}, 3.0);
  const auto g = torch::autograd::grad({(w * w).sum()}, {basis}, {}, true, true)[0];
  EXPECT_TRUE(mlip::test::contains(
      mlip::test::error_of([&] { torch::autograd::grad({g.sum()}, {output}, {}, true, true); }),
      "a third was asked for"));
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
