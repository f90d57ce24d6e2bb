// models::linear_map (models/equivariant/linear_map.h) against s · matmul by plain autograd: the
// value and gradients for contiguous inputs, rows of wider tensors and transposed ones; first and
// second derivatives as in a training step, float32 and float64; no rows; a shape mismatch is an
// error naming both shapes.
#include "models/equivariant/linear_map.h"

#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <type_traits>

#include "test_util.h"

namespace {

template <typename T>
struct LinearMapTest : ::testing::Test {
  static torch::Dtype dtype() { return std::is_same_v<T, float> ? torch::kFloat32 : torch::kFloat64; }
  static double tolerance() { return std::is_same_v<T, float> ? 1e-5 : 1e-13; }
};
using Reals = ::testing::Types<float, double>;
TYPED_TEST_SUITE(LinearMapTest, Reals);

double relative(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

TYPED_TEST(LinearMapTest, EqualsTheScaledProductForAnyLayout) {
  torch::manual_seed(1);
  const auto opts = torch::TensorOptions().dtype(TestFixture::dtype());
  const auto w = torch::randn({5, 6}, opts);
  const auto contiguous = torch::randn({3, 4, 5}, opts);
  const auto strided = torch::randn({3, 5, 4}, opts).transpose(1, 2);  // [3, 4, 5], not contiguous
  const auto wide = torch::randn({3, 9, 5}, opts);
  // Rows of a wider tensor: evenly strided (read in place) and not (copied).
  const auto even = wide.narrow(1, 2, 1), uneven = wide.narrow(1, 3, 4);
  for (const auto& x : {contiguous, strided, even, uneven}) {
    const auto xv = x.detach().requires_grad_(true), wv = w.detach().requires_grad_(true);
    const auto y = mlip::models::linear_map(xv, wv, 0.3);
    EXPECT_EQ(y.sizes(), (std::vector<int64_t>{3, x.size(1), 6}));
    EXPECT_LT(relative(y, torch::matmul(x, w) * 0.3), TestFixture::tolerance());
    // The map's gradient from an incoming gradient that is itself a strided view.
    const auto incoming = torch::randn({3, 2 * x.size(1), 6}, opts).narrow(1, 1, x.size(1));
    const auto g = torch::autograd::grad({y}, {xv, wv}, {incoming});
    EXPECT_LT(relative(g[0], torch::matmul(incoming, w.t()) * 0.3), TestFixture::tolerance());
    EXPECT_LT(relative(g[1], torch::matmul(x.reshape({-1, 5}).t(), incoming.reshape({-1, 6})) * 0.3),
              TestFixture::tolerance());
  }
}

TYPED_TEST(LinearMapTest, RowsOfSeveralUnevenAxesAreCopiedInOrder) {
  torch::manual_seed(2);
  const auto opts = torch::TensorOptions().dtype(TestFixture::dtype());
  const auto w = torch::randn({5, 6}, opts);
  // [2, 3, 4, 5]: rows strided unevenly on two axes, the outer two swapped.
  const auto x = torch::randn({3, 2, 7, 5}, opts).narrow(2, 2, 4).transpose(0, 1);
  ASSERT_FALSE(x.is_contiguous());
  const auto xv = x.detach().requires_grad_(true), wv = w.detach().requires_grad_(true);
  const auto y = mlip::models::linear_map(xv, wv, 1.5);
  EXPECT_LT(relative(y, torch::matmul(x, w) * 1.5), TestFixture::tolerance());
  const auto incoming = torch::randn({2, 3, 4, 6}, opts);
  const auto g = torch::autograd::grad({y}, {wv}, {incoming});
  EXPECT_LT(relative(g[0], torch::matmul(x.reshape({-1, 5}).t(), incoming.reshape({-1, 6})) * 1.5),
            TestFixture::tolerance());
}

TYPED_TEST(LinearMapTest, SecondDerivativesEqualThoseOfThePlainProduct) {
  torch::manual_seed(2);
  const auto opts = torch::TensorOptions().dtype(TestFixture::dtype());
  const auto x0 = torch::randn({7, 3, 5}, opts), w0 = torch::randn({5, 4}, opts), r0 = torch::randn({7, 3, 4}, opts);
  const auto u = torch::randn({7, 3, 5}, opts), v = torch::randn({5, 4}, opts);
  auto grads = [&](bool fused) {
    const auto x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    const auto r = r0.clone().requires_grad_(true);
    const auto y = fused ? mlip::models::linear_map(x.sin(), w, 0.7) : torch::matmul(x.sin(), w) * 0.7;
    const auto first = torch::autograd::grad({(r * y).sum()}, {x, w}, {}, true, true);
    const auto loss = (first[0] * u).sum() + (first[1] * v).sum() + first[0].pow(2).sum();
    auto g = torch::autograd::grad({loss}, {r, x, w});
    g.push_back(first[0].detach());
    g.push_back(first[1].detach());
    return g;
  };
  const auto fused = grads(true), plain = grads(false);
  const char* names[] = {"d loss / d r", "d loss / d x", "d loss / d w", "d E / d x", "d E / d w"};
  for (size_t k = 0; k < fused.size(); ++k) {
    EXPECT_GT(plain[k].abs().max().template item<double>(), 1e-3) << names[k] << ": a quantity that can differ";
    EXPECT_LT(relative(fused[k], plain[k]), TestFixture::tolerance()) << names[k];
  }
}

TEST(LinearMap, NoRowsGiveAnEmptyOutputAndZeroMapGradient) {
  const auto x = torch::zeros({0, 3, 5}, torch::kFloat64).requires_grad_(true);
  const auto w = torch::randn({5, 4}, torch::kFloat64).requires_grad_(true);
  const auto y = mlip::models::linear_map(x, w, 2.0);
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{0, 3, 4}));
  const auto g = torch::autograd::grad({y.sum()}, {w})[0];
  EXPECT_TRUE(torch::equal(g, torch::zeros({5, 4}, torch::kFloat64)));
}

TEST(LinearMap, AShapeMismatchNamesBothShapes) {
  const auto message = mlip::test::error_of(
      [] { mlip::models::linear_map(torch::zeros({2, 3}), torch::zeros({4, 5}), 1.0); });
  EXPECT_TRUE(mlip::test::contains(message, "expected x [..., i] and w [i, o], got x [2, 3] and w [4, 5]")) << message;
}

}  // namespace
