#include "models/equivariant/spherical.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "error.h"

namespace {

using mlip::models::kMaxL;
using mlip::models::spherical_harmonics;
using mlip::models::wigner_3j;
using mlip::models::wigner_d;

torch::Tensor random_unit(int64_t n, uint64_t seed) {
  torch::manual_seed(seed);
  auto d = torch::randn({n, 3}, torch::kFloat64);
  return d / d.norm(2, 1, true);
}

/// A uniformly random rotation (from a random unit quaternion).
torch::Tensor random_rotation(uint64_t seed) {
  torch::manual_seed(seed);
  auto q = torch::randn({4}, torch::kFloat64);
  q /= q.norm();
  const double w = q[0].item<double>(), x = q[1].item<double>(), y = q[2].item<double>(), z = q[3].item<double>();
  return torch::tensor({1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w),  //
                        2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w),  //
                        2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)},
                       torch::kFloat64)
      .reshape({3, 3});
}

torch::Tensor block(const torch::Tensor& y, int64_t l) { return y.narrow(1, l * l, 2 * l + 1); }

TEST(SphericalHarmonics, ComponentNormalisationAndBasis) {
  const auto d = random_unit(200, 1);
  const auto y = spherical_harmonics(d, kMaxL);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{200, 16}));
  // Addition theorem: sum_m Y_lm(d)^2 = 2l + 1 at every direction.
  for (int64_t l = 0; l <= kMaxL; ++l)
    EXPECT_TRUE(torch::allclose(block(y, l).pow(2).sum(1), torch::full({200}, double(2 * l + 1), torch::kFloat64),
                                1e-13, 0))
        << "l = " << l;
  EXPECT_TRUE(torch::allclose(block(y, 0), torch::ones({200, 1}, torch::kFloat64)));
  const auto expected_l1 = std::sqrt(3.0) * torch::stack({d.select(1, 1), d.select(1, 2), d.select(1, 0)}, 1);
  EXPECT_TRUE(torch::allclose(block(y, 1), expected_l1, 1e-14, 0));
  // Mean square of every component over many directions ~ 1 (Monte Carlo, loose).
  const auto many = spherical_harmonics(random_unit(200000, 2), kMaxL);
  EXPECT_TRUE(torch::allclose(many.pow(2).mean(0), torch::ones({16}, torch::kFloat64), 0, 0.03)) << many.pow(2).mean(0);
  // Parity: Y_l(-d) = (-1)^l Y_l(d).
  const auto neg = spherical_harmonics(-d, kMaxL);
  for (int64_t l = 0; l <= kMaxL; ++l)
    EXPECT_TRUE(torch::allclose(block(neg, l), block(y, l) * (l % 2 ? -1.0 : 1.0), 1e-14, 0));
  // float32 in, float32 out.
  EXPECT_EQ(spherical_harmonics(d.to(torch::kFloat32), 2).scalar_type(), torch::kFloat32);
}

// Y_l(R d) = D_l(R) Y_l(d): D is fitted on the library's own directions, checked on others.
TEST(SphericalHarmonics, TransformWithOrthogonalWignerMatrices) {
  const auto d = random_unit(300, 3);
  for (uint64_t seed : {11u, 12u, 13u}) {
    const auto r = random_rotation(seed);
    const auto y = spherical_harmonics(d, kMaxL);
    const auto yr = spherical_harmonics(d.matmul(r.t()), kMaxL);
    for (int64_t l = 0; l <= kMaxL; ++l) {
      const auto dl = wigner_d(l, r);
      EXPECT_TRUE(torch::allclose(block(yr, l), block(y, l).matmul(dl.t()), 1e-12, 1e-12)) << "l = " << l;
      EXPECT_TRUE(torch::allclose(dl.matmul(dl.t()), torch::eye(2 * l + 1, torch::kFloat64), 1e-12, 1e-12));
      // A representation: D(R1 R2) = D(R1) D(R2).
      const auto r2 = random_rotation(seed + 100);
      EXPECT_TRUE(torch::allclose(wigner_d(l, r.matmul(r2)), dl.matmul(wigner_d(l, r2)), 1e-12, 1e-12));
    }
  }
}

TEST(Wigner3j, OrthogonalInvariantAndKnownCases) {
  int checked = 0;
  for (int64_t l1 = 0; l1 <= kMaxL; ++l1)
    for (int64_t l2 = 0; l2 <= kMaxL; ++l2)
      for (int64_t l3 = std::abs(l1 - l2); l3 <= std::min(l1 + l2, kMaxL); ++l3) {
        SCOPED_TRACE(std::to_string(l1) + " " + std::to_string(l2) + " " + std::to_string(l3));
        const auto c = wigner_3j(l1, l2, l3);
        ASSERT_EQ(c.sizes(), (std::vector<int64_t>{2 * l1 + 1, 2 * l2 + 1, 2 * l3 + 1}));
        EXPECT_NEAR(c.norm().item<double>(), 1.0, 1e-13);
        // Orthogonality: sum_{m1 m2} C[m1 m2 m3] C[m1 m2 m3'] = delta / (2 l3 + 1).
        const auto flat = c.reshape({-1, 2 * l3 + 1});
        EXPECT_TRUE(torch::allclose(flat.t().matmul(flat), torch::eye(2 * l3 + 1, torch::kFloat64) / double(2 * l3 + 1),
                                    1e-12, 1e-12));
        // Invariance under rotations other than those of the solve.
        for (uint64_t seed : {21u, 22u}) {
          const auto r = random_rotation(seed);
          const auto rotated = torch::einsum("ia,jb,kc,abc->ijk", {wigner_d(l1, r), wigner_d(l2, r), wigner_d(l3, r), c});
          EXPECT_TRUE(torch::allclose(rotated, c, 1e-12, 1e-12));
        }
        ++checked;
      }
  EXPECT_EQ(checked, 34);
  // (l, l, 0): delta / sqrt(2l + 1). (1, 1, 1): the Levi-Civita symbol / sqrt(6) in (y, z, x),
  // a cyclic relabelling of (x, y, z) that keeps its sign up to the overall sign.
  for (int64_t l = 0; l <= kMaxL; ++l)
    EXPECT_TRUE(torch::allclose(wigner_3j(l, l, 0).squeeze(2), torch::eye(2 * l + 1, torch::kFloat64) / std::sqrt(2.0 * l + 1),
                                1e-13, 1e-13));
  auto eps = torch::zeros({3, 3, 3}, torch::kFloat64);
  for (auto [i, j, k] : std::vector<std::array<int, 3>>{{0, 1, 2}, {1, 2, 0}, {2, 0, 1}}) {
    eps[i][j][k] = 1.0;
    eps[i][k][j] = -1.0;
  }
  const auto c111 = wigner_3j(1, 1, 1);
  EXPECT_TRUE(torch::allclose(c111.abs(), eps.abs() / std::sqrt(6.0), 1e-13, 1e-13));
  EXPECT_TRUE(torch::allclose(c111, -c111.permute({1, 0, 2}), 1e-13, 1e-13));
}

// The same rotation gives the same bits, whatever the heap held before: the equivariant model's
// coupling buffers come from these, and a run is promised to be bit-reproducible
// (docs/training.md "Reproducibility"; LAPACK gelsy read an uninitialised pivot array).
TEST(WignerD, BitIdenticalWhateverTheHeapHeld) {
  const auto r = random_rotation(21);
  std::vector<torch::Tensor> d0, w0;
  for (int64_t l = 1; l <= kMaxL; ++l) d0.push_back(wigner_d(l, r));
  const auto c0 = wigner_3j(1, 1, 1);
  for (int trial = 0; trial < 20; ++trial) {
    {
      // Leave different leftovers of every small size on the heap.
      std::vector<std::vector<int64_t>> garbage;
      for (size_t n = 1; n < 64; ++n) garbage.emplace_back(n, int64_t(0x0101010101010101) * (trial + int64_t(n)));
    }
    for (int64_t l = 1; l <= kMaxL; ++l)
      EXPECT_TRUE(torch::equal(wigner_d(l, r), d0[size_t(l - 1)])) << "l = " << l << ", trial " << trial;
    EXPECT_TRUE(torch::equal(wigner_3j(1, 1, 1), c0)) << "trial " << trial;
  }
}

TEST(Wigner3j, RefusesImpossibleTriples) {
  EXPECT_THROW(wigner_3j(1, 1, 3), mlip::Error);
  EXPECT_THROW(wigner_3j(3, 0, 2), mlip::Error);
  EXPECT_THROW(wigner_3j(4, 4, 0), mlip::Error);
  EXPECT_THROW(spherical_harmonics(random_unit(2, 1), 4), mlip::Error);
}

}  // namespace
