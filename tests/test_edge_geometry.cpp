// The training frames' geometry computed directly (models/equivariant/edge_geometry.h) against
// the saved model's own edge_geometry and autograd: the basis, the harmonics and both
// derivatives, for every l_max, two cutoff exponents, edges inside and beyond r_max.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <type_traits>

#include "error.h"
#include "models/equivariant/edge_geometry.h"
#include "models/equivariant/spherical.h"

namespace {

double relative(const torch::Tensor& a, const torch::Tensor& b) {
  const auto diff = (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
  return diff / std::max(1e-30, b.to(torch::kFloat64).abs().max().item<double>());
}

double max_abs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

/// Edge vectors of random directions and lengths from 0.3 Å to 1.3 r_max (some beyond it).
torch::Tensor random_edges(int64_t n, double r_max, torch::Dtype dtype) {
  std::mt19937 rng(7);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> length(0.3, 1.3 * r_max);
  auto d = torch::empty({n, 3}, torch::kFloat64);
  auto a = d.accessor<double, 2>();
  for (int64_t e = 0; e < n; ++e) {
    double v[3], norm = 0;
    for (double& x : v) x = normal(rng), norm += x * x;
    const double r = length(rng) / std::sqrt(norm);
    for (int k = 0; k < 3; ++k) a[e][k] = v[k] * r;
  }
  return d.to(dtype);
}

template <typename T>
class EdgeGeometryTest : public ::testing::Test {
 protected:
  static constexpr bool kDouble = std::is_same_v<T, double>;
  torch::Dtype dtype() const { return kDouble ? torch::kFloat64 : torch::kFloat32; }
  double tolerance() const { return kDouble ? 1e-12 : 2e-5; }
};
using Dtypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(EdgeGeometryTest, Dtypes);

TYPED_TEST(EdgeGeometryTest, EqualsTheModelsEdgeGeometryAndAutograd) {
  for (int64_t l_max = 0; l_max <= mlip::models::kMaxL; ++l_max)
    for (double p : {6.0, 5.5}) {
      mlip::models::EquivariantConfig c;
      c.type_map = {"H", "O"};
      c.l_max = l_max, c.polynomial_p = p, c.r_max = 4.5, c.num_bessels = 8, c.num_layers = 1;
      c.num_features = 4, c.radial_width = 8;
      c.precision = this->kDouble ? "float64" : "float32";
      auto module = mlip::models::build_equivariant(c);
      const auto d = random_edges(300, c.r_max, this->dtype());
      const int64_t nh = (l_max + 1) * (l_max + 1);
      const auto reference = mlip::models::edge_geometry_by_autograd(module, d, c.num_bessels, nh);
      const auto direct = mlip::models::edge_geometry_direct(c, d);
      const std::string where = "l_max " + std::to_string(l_max) + ", p " + std::to_string(p);
      EXPECT_EQ(direct.basis.scalar_type(), this->dtype());
      EXPECT_EQ(direct.basis_jacobian.sizes(), reference.basis_jacobian.sizes()) << where;
      EXPECT_EQ(direct.y_jacobian.sizes(), reference.y_jacobian.sizes()) << where;
      EXPECT_LT(relative(direct.basis, reference.basis), this->tolerance()) << where;
      EXPECT_LT(relative(direct.basis_jacobian, reference.basis_jacobian), this->tolerance()) << where;
      EXPECT_LT(relative(direct.y, reference.y), this->tolerance()) << where;
      EXPECT_LT(relative(direct.y_jacobian, reference.y_jacobian), this->tolerance()) << where;
      // Beyond r_max the basis and its derivative are zero.
      const auto beyond = (d.to(torch::kFloat64).norm(2, 1) >= c.r_max).nonzero().squeeze(1);
      ASSERT_GT(beyond.size(0), 0);
      EXPECT_EQ(max_abs(direct.basis.index_select(0, beyond)), 0.0);
      EXPECT_EQ(max_abs(direct.basis_jacobian.index_select(0, beyond)), 0.0);
    }
}

TYPED_TEST(EdgeGeometryTest, RefusesAnEdgeOfZeroLength) {
  mlip::models::EquivariantConfig c;
  c.type_map = {"H"};
  c.precision = this->kDouble ? "float64" : "float32";
  auto d = random_edges(4, c.r_max, this->dtype());
  d[2].zero_();
  try {
    mlip::models::edge_geometry_direct(c, d);
    FAIL() << "expected an error";
  } catch (const mlip::Error& e) {
    EXPECT_STREQ(e.what(), "edge geometry: edge 2 has zero length");
  }
}

}  // namespace
