#include "models/kernels/fast_tanh.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace {

/// Inputs over many magnitudes, both signs, and the special points of the implementation.
std::vector<double> inputs() {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> unit(-1.0, 1.0), decade(-12.0, 1.7);
  std::vector<double> x;
  for (int k = 0; k < 200000; ++k) x.push_back(unit(rng) * std::pow(10.0, decade(rng)));
  for (double s : {0.0, -0.0, 0.625, -0.625, std::nextafter(0.625, 0.0), 19.9, 20.0, 20.1, 40.0, 1e3, -1e3, 1e300,
                   -1e300, 1e-300, -1e-310, std::numeric_limits<double>::infinity(),
                   -std::numeric_limits<double>::infinity()})
    x.push_back(s);
  return x;
}

template <typename Real>
class FastTanh : public ::testing::Test {};
using Reals = ::testing::Types<float, double>;
TYPED_TEST_SUITE(FastTanh, Reals);

TYPED_TEST(FastTanh, MatchesStdTanhToAFewUlp) {
  using Real = TypeParam;
  const auto x = inputs();
  std::vector<Real> y(x.begin(), x.end());
  mlip::models::tanh_inplace(y.data(), int64_t(y.size()));
  const double eps = std::numeric_limits<Real>::epsilon();
  double worst = 0;
  for (size_t k = 0; k < x.size(); ++k) {
    const double ref = std::tanh(double(Real(x[k])));
    const double err = std::abs(double(y[k]) - ref);
    const double rel = ref == 0 ? err : err / std::abs(ref);
    worst = std::max(worst, rel);
    ASSERT_LE(rel, 5 * eps) << "x = " << x[k];
    ASSERT_EQ(std::signbit(double(y[k])), std::signbit(ref)) << "x = " << x[k];
  }
  EXPECT_GT(worst, 0.0);  // really computed, not copied from std::tanh
}

TYPED_TEST(FastTanh, OddAndBounded) {
  using Real = TypeParam;
  std::vector<Real> a, b;
  for (int k = -4000; k <= 4000; ++k) {
    a.push_back(Real(k * 0.01));
    b.push_back(Real(-k * 0.01));
  }
  mlip::models::tanh_inplace(a.data(), int64_t(a.size()));
  mlip::models::tanh_inplace(b.data(), int64_t(b.size()));
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k], -b[k]);
    EXPECT_LE(std::abs(a[k]), Real(1));
    if (k > 0) {
      EXPECT_GE(a[k], a[k - 1]);  // monotone
    }
  }
}

}  // namespace
