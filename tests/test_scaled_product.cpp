#include <gtest/gtest.h>

#include "models/kernels/scaled_product.h"
#include "train/operation_counter.h"

namespace {

using mlip::models::scaled_product;

double max_abs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

template <typename Real>
class ScaledProduct : public ::testing::Test {
 protected:
  torch::Dtype dtype() const { return std::is_same_v<Real, float> ? torch::kFloat32 : torch::kFloat64; }
  double tolerance() const { return std::is_same_v<Real, float> ? 1e-5 : 1e-13; }
};
using Reals = ::testing::Types<float, double>;
TYPED_TEST_SUITE(ScaledProduct, Reals);

TYPED_TEST(ScaledProduct, EqualsTheProductScaledAndAddedInOneCall) {
  torch::manual_seed(5);
  const torch::Tensor a = torch::randn({7, 5}, this->dtype()), b = torch::randn({5, 3}, this->dtype());
  const torch::Tensor c = torch::randn({7, 3}, this->dtype());
  const auto exact = [](const torch::Tensor& t) { return t.to(torch::kFloat64); };
  const auto product = exact(a).mm(exact(b));
  struct Case {
    double alpha;
    bool add;
    double beta;
  };
  for (const Case& k : {Case{1.0, false, 0.0}, Case{0.37, false, 0.0}, Case{-2.5, true, 0.8}, Case{1.0, true, 1.0},
                        Case{0.5, true, 0.0}}) {
    SCOPED_TRACE("alpha " + std::to_string(k.alpha) + ", beta " + std::to_string(k.beta));
    (void)scaled_product(a, b, k.alpha);  // the first of a dtype makes the kept zero
    mlip::train::OperationCounter counter;
    const auto got = scaled_product(a, b, k.alpha, k.add ? c : torch::Tensor(), k.beta);
    EXPECT_EQ(counter.counts().operators, 1);  // one call, whatever the case
    const auto want = k.alpha * product + (k.add ? k.beta * exact(c) : torch::zeros_like(product));
    EXPECT_EQ(got.scalar_type(), this->dtype());
    EXPECT_LT(max_abs(exact(got) - want), this->tolerance() * (1 + max_abs(want)));
  }
  // Transposed views, and a product over nothing (zeros, plus beta·c).
  const auto t = scaled_product(b.t(), a.t(), 2.0);
  EXPECT_LT(max_abs(exact(t) - 2.0 * product.t()), this->tolerance() * 10);
  const auto empty =
      scaled_product(torch::zeros({7, 0}, this->dtype()), torch::zeros({0, 3}, this->dtype()), 3.0, c, 0.5);
  EXPECT_LT(max_abs(exact(empty) - 0.5 * exact(c)), this->tolerance());
  EXPECT_TRUE(
      torch::equal(scaled_product(torch::zeros({7, 0}, this->dtype()), torch::zeros({0, 3}, this->dtype()), 3.0),
                   torch::zeros({7, 3}, this->dtype())));
}

TEST(ScaledProduct, AnAddendWithNaNIsNotReadWhenBetaIsZero) {
  // beta 0 means no addend, as in BLAS: the kept zero, or a caller's c, is never read.
  const auto a = torch::ones({2, 2}, torch::kFloat64), b = torch::ones({2, 2}, torch::kFloat64);
  const auto c = torch::full({2, 2}, std::nan(""), torch::kFloat64);
  EXPECT_TRUE(torch::equal(scaled_product(a, b, 0.5, c, 0.0), torch::ones({2, 2}, torch::kFloat64)));
}

}  // namespace
