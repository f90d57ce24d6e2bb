// models::edge_forces (models/equivariant/edge_forces.h) against the plain sums by autograd:
// forces, virials and their gradients by the energy's gradients (as in the force loss's
// gradient), two frames, float32 and float64; a second derivative and mismatched shapes are
// errors naming what was expected.
#include "models/equivariant/edge_forces.h"

#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <type_traits>

#include "test_util.h"

namespace {

template <typename T>
struct EdgeForcesTest : ::testing::Test {
  static torch::Dtype dtype() { return std::is_same_v<T, float> ? torch::kFloat32 : torch::kFloat64; }
  static double tolerance() { return std::is_same_v<T, float> ? 1e-5 : 1e-13; }
};
using Reals = ::testing::Types<float, double>;
TYPED_TEST_SUITE(EdgeForcesTest, Reals);

double relative(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

/// Two frames of 4 atoms: 7 and 5 edges, each pair's basis on one of its edges.
mlip::models::EdgeGeometryTables tables_of(torch::Dtype dtype) {
  const auto idx = torch::TensorOptions().dtype(torch::kInt64);
  mlip::models::EdgeGeometryTables t;
  t.i = torch::tensor({0, 0, 1, 1, 2, 3, 3, 4, 5, 5, 6, 7}, idx);
  t.j = torch::tensor({1, 2, 0, 3, 0, 1, 2, 5, 4, 7, 7, 6}, idx);
  t.edge_frame = torch::tensor({0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1}, idx);
  t.pair_edge = torch::tensor({0, 1, 3, 6, 7, 9, 10}, idx);
  t.d = torch::randn({12, 3}, dtype);
  t.y_jacobian = torch::randn({12, 4, 3}, dtype);
  t.basis_jacobian = torch::randn({7, 8, 3}, dtype);
  t.frames = 2;
  t.atoms = 4;
  return t;
}

std::pair<torch::Tensor, torch::Tensor> plain(const torch::Tensor& gb, const torch::Tensor& gy,
                                              const mlip::models::EdgeGeometryTables& t) {
  const auto de = (gy.unsqueeze(2) * t.y_jacobian).sum(1).index_add(0, t.pair_edge, (gb.unsqueeze(2) * t.basis_jacobian).sum(1));
  const auto forces = torch::zeros({8, 3}, de.options()).index_add(0, t.i, de).index_add(0, t.j, -de);
  const auto virial = -torch::zeros({2, 3, 3}, de.options()).index_add(0, t.edge_frame, t.d.unsqueeze(2) * de.unsqueeze(1));
  return {forces, virial};
}

TYPED_TEST(EdgeForcesTest, ForcesVirialsAndTheirGradientsEqualThePlainSums) {
  torch::manual_seed(4);
  const auto t = tables_of(TestFixture::dtype());
  const auto gb0 = torch::randn({7, 8}, TestFixture::dtype()), gy0 = torch::randn({12, 4}, TestFixture::dtype());
  const auto wf = torch::randn({8, 3}, TestFixture::dtype()), wv = torch::randn({2, 3, 3}, TestFixture::dtype());
  auto run = [&](bool fused) {
    const auto gb = gb0.clone().requires_grad_(true), gy = gy0.clone().requires_grad_(true);
    const auto [forces, virial] = fused ? mlip::models::edge_forces(gb, gy, t) : plain(gb, gy, t);
    const auto g = torch::autograd::grad({(forces * wf).sum() + (virial * wv).sum()}, {gb, gy});
    return std::vector<torch::Tensor>{forces.detach(), virial.detach(), g[0], g[1]};
  };
  const auto fused = run(true), reference = run(false);
  for (size_t k = 0; k < fused.size(); ++k) {
    EXPECT_EQ(fused[k].sizes(), reference[k].sizes()) << "quantity " << k;
    EXPECT_GT(reference[k].abs().max().template item<double>(), 1e-3) << "quantity " << k << " can differ";
    EXPECT_LT(relative(fused[k], reference[k]), TestFixture::tolerance()) << "quantity " << k;
  }
}

TEST(EdgeForces, ASecondDerivativeAndMismatchedShapesAreErrors) {
  const auto t = tables_of(torch::kFloat64);
  const auto gb = torch::randn({7, 8}, torch::kFloat64).requires_grad_(true);
  const auto gy = torch::randn({12, 4}, torch::kFloat64).requires_grad_(true);
  const auto forces = mlip::models::edge_forces(gb, gy, t).first;
  auto message = mlip::test::error_of([&] { torch::autograd::grad({forces.pow(2).sum()}, {gy}, {}, true, true); });
  EXPECT_TRUE(mlip::test::contains(message, "first derivatives only")) << message;
  message = mlip::test::error_of([&] { mlip::models::edge_forces(gb, gy.narrow(0, 0, 11), t); });
  EXPECT_TRUE(mlip::test::contains(message, "expected grad_basis [7, B] and grad_y [12, Y] matching the Jacobians, got [7, 8] and [11, 4]"))
      << message;
}

}  // namespace
