// models::split_rows (models/equivariant/row_split.h) against narrow + reshape by autograd: the
// parts' values and layout, first and second derivatives (with a part that gets no gradient),
// float32 and float64; shapes that do not add up are errors naming them.
#include "models/equivariant/row_split.h"

#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <type_traits>

#include "test_util.h"

namespace {

template <typename T>
struct RowSplitTest : ::testing::Test {
  static torch::Dtype dtype() { return std::is_same_v<T, float> ? torch::kFloat32 : torch::kFloat64; }
};
using Reals = ::testing::Types<float, double>;
TYPED_TEST_SUITE(RowSplitTest, Reals);

const std::vector<int64_t> kRows = {2, 3, 6}, kComponents = {1, 3, 3};

std::vector<torch::Tensor> plain_split(const torch::Tensor& x) {
  std::vector<torch::Tensor> out;
  int64_t first = 0;
  for (size_t k = 0; k < kRows.size(); ++k) {
    out.push_back(x.narrow(1, first, kRows[k]).reshape({x.size(0), kComponents[k], -1}));
    first += kRows[k];
  }
  return out;
}

TYPED_TEST(RowSplitTest, PartsAndTwoDerivativesEqualNarrowAndReshape) {
  torch::manual_seed(3);
  const auto opts = torch::TensorOptions().dtype(TestFixture::dtype());
  const auto x0 = torch::randn({4, 11, 5}, opts), u = torch::randn({4, 11, 5}, opts);
  std::vector<torch::Tensor> weights;
  for (size_t k = 0; k < kRows.size(); ++k) weights.push_back(torch::randn({4, kComponents[k], kRows[k] * 5 / kComponents[k]}, opts));
  auto run = [&](bool fused) {
    const auto x = x0.clone().requires_grad_(true);
    const auto parts = fused ? mlip::models::split_rows(x.sin(), kRows, kComponents) : plain_split(x.sin());
    // Parts 0 and 2 enter the energy; part 1 gets no gradient.
    const auto energy = (parts[0] * weights[0]).sum() + (parts[2].pow(2) * weights[2]).sum();
    const auto first = torch::autograd::grad({energy}, {x}, {}, true, true)[0];
    const auto second = torch::autograd::grad({(first * u).sum()}, {x})[0];
    std::vector<torch::Tensor> out(parts.begin(), parts.end());
    out.push_back(first.detach());
    out.push_back(second);
    return out;
  };
  const auto fused = run(true), plain = run(false);
  for (size_t k = 0; k < fused.size(); ++k) {
    EXPECT_EQ(fused[k].sizes(), plain[k].sizes()) << "quantity " << k;
    EXPECT_GT(plain[k].abs().max().template item<double>(), 1e-3) << "quantity " << k << " can differ";
    EXPECT_TRUE(torch::equal(fused[k], plain[k])) << "quantity " << k;  // copies and sums only
  }
  for (size_t k = 0; k < kRows.size(); ++k) EXPECT_TRUE(fused[k].is_contiguous());
}

TEST(RowSplit, ShapesThatDoNotAddUpAreNamed) {
  auto message = mlip::test::error_of([] { mlip::models::split_rows(torch::zeros({2, 10, 4}), kRows, kComponents); });
  EXPECT_TRUE(mlip::test::contains(message, "expected x [n, 11, f] and one component count per part, got x [2, 10, 4]"))
      << message;
  message = mlip::test::error_of([] { mlip::models::split_rows(torch::zeros({2, 3, 1}), {3}, {2}); });
  EXPECT_TRUE(mlip::test::contains(message, "part 0 has 3 rows of 1, not divisible into 2 components")) << message;
}

}  // namespace
