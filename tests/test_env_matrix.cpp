#include "models/se_e2_a/env_matrix.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "error.h"
#include "test_util.h"

namespace {

using mlip::data::build_neighbor_list;
using mlip::models::compute_env_matrix;
using mlip::models::EnvMatrix;
using mlip::models::EnvMatrixParams;

constexpr double kRcut = 4.0, kRcutSmth = 1.0;

EnvMatrixParams params(std::vector<int64_t> sel) {
  EnvMatrixParams p;
  p.rcut = kRcut;
  p.rcut_smth = kRcutSmth;
  p.sel = std::move(sel);
  return p;
}

/// Direct formula of docs/se_e2_a.md for one pair vector.
std::array<double, 4> direct_row(const double* d) {
  const double r = std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
  double w;
  if (r < kRcutSmth) {
    w = 1;
  } else if (r >= kRcut) {
    w = 0;
  } else {
    double u = (r - kRcutSmth) / (kRcut - kRcutSmth);
    w = u * u * u * (-6 * u * u + 15 * u - 10) + 1;
  }
  const double s = w / r;
  return {s, s * d[0] / r, s * d[1] / r, s * d[2] / r};
}

using mlip::test::Frame;

/// Rejection sampling keeps atoms at least 0.8 Å apart (no accidental overlaps).
Frame random_frame(int n, bool periodic, unsigned seed) {
  return mlip::test::random_frame(n, periodic, seed, 7.0, {0.7, -0.4, 0.3}, 0.8, 0.35);
}

template <typename Real>
EnvMatrix env_of(const Frame& f, const EnvMatrixParams& p) {
  std::vector<Real> pos(f.pos.begin(), f.pos.end());
  auto nl = build_neighbor_list<Real>(pos.data(), int64_t(f.types.size()), f.cell.empty() ? nullptr : f.cell.data(),
                                      f.pbc, p.rcut);
  return compute_env_matrix<Real>(nl, f.types, p);
}

template <typename Real>
class EnvMatrixTest : public ::testing::Test {};
using RealTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(EnvMatrixTest, RealTypes);

TYPED_TEST(EnvMatrixTest, RowsMatchTheDirectFormulaAndBlocksAreSortedNearestFirst) {
  const double tol = std::is_same<TypeParam, float>::value ? 2e-6 : 1e-14;
  for (bool periodic : {true, false}) {
    SCOPED_TRACE(periodic ? "periodic" : "cluster");
    Frame f = random_frame(60, periodic, periodic ? 11 : 12);
    auto p = params({6, 10});
    EnvMatrix env = env_of<TypeParam>(f, p);
    ASSERT_EQ(env.rij.sizes(), (std::vector<int64_t>{60, 16, 4}));
    ASSERT_EQ(env.drij.sizes(), (std::vector<int64_t>{60, 16, 4, 3}));
    auto rij = env.rij.to(torch::kFloat64);
    auto vec = env.vec.to(torch::kFloat64);
    auto nlist = env.nlist;
    // Independent count of neighbours per (centre, type) to check truncation and sorting.
    std::vector<double> pos = f.pos;
    auto nl = build_neighbor_list<double>(pos.data(), 60, f.cell.empty() ? nullptr : f.cell.data(), f.pbc, kRcut);
    auto off = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.offsets);
    auto nb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.neighbor);
    auto dist = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.distance);
    int64_t truncated = 0, dropped = 0;
    for (int i = 0; i < 60; ++i) {
      std::vector<std::vector<double>> by_type(2);
      for (int64_t q = off(i); q < off(i + 1); ++q) by_type[size_t(f.types[size_t(nb(q))])].push_back(dist(q));
      int64_t base = 0;
      for (int t = 0; t < 2; ++t) {
        auto& ds = by_type[size_t(t)];
        std::sort(ds.begin(), ds.end());
        const int64_t cap = p.sel[size_t(t)], kept = std::min<int64_t>(cap, int64_t(ds.size()));
        if (int64_t(ds.size()) > cap) ++truncated, dropped += int64_t(ds.size()) - cap;
        for (int64_t s = 0; s < cap; ++s) {
          const int64_t slot = base + s;
          if (s >= kept) {
            EXPECT_EQ(nlist[i][slot].item<int64_t>(), -1);
            for (int a = 0; a < 4; ++a) EXPECT_EQ(rij[i][slot][a].item<double>(), 0.0);
            continue;
          }
          const int64_t j = nlist[i][slot].item<int64_t>();
          ASSERT_GE(j, 0);
          EXPECT_EQ(f.types[size_t(j)], t) << "neighbour in the wrong type block";
          double d[3] = {vec[i][slot][0].item<double>(), vec[i][slot][1].item<double>(), vec[i][slot][2].item<double>()};
          const double r = std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
          EXPECT_NEAR(r, ds[size_t(s)], 10 * tol) << "slot " << s << " is not the " << s << "-th nearest";
          auto expect = direct_row(d);
          for (int a = 0; a < 4; ++a) EXPECT_NEAR(rij[i][slot][a].item<double>(), expect[size_t(a)], tol * (1 + std::abs(expect[size_t(a)])));
        }
        base += cap;
      }
    }
    EXPECT_GT(truncated, 0) << "the test should exercise truncation";
    EXPECT_EQ(env.truncated_blocks, truncated);
    EXPECT_EQ(env.dropped_neighbors, dropped);
  }
}

TEST(EnvMatrix, DerivativeMatchesCentralFiniteDifferences) {
  // Non-periodic cluster; move each neighbour j of each centre and difference R(d).
  Frame f = random_frame(25, false, 21);
  auto p = params({30, 30});  // no truncation: slots are identified by the neighbour index
  EnvMatrix env = env_of<double>(f, p);
  const double h = 1e-5;
  int checked_smooth = 0, checked_inner = 0;
  for (int j = 0; j < 25; ++j)
    for (int b = 0; b < 3; ++b) {
      Frame fp = f, fm = f;
      fp.pos[3 * j + b] += h;
      fm.pos[3 * j + b] -= h;
      EnvMatrix ep = env_of<double>(fp, p), em = env_of<double>(fm, p);
      for (int i = 0; i < 25; ++i) {
        if (i == j) continue;
        auto find_slot = [&](const EnvMatrix& e) {
          for (int64_t s = 0; s < p.nslots(); ++s)
            if (e.nlist[i][s].item<int64_t>() == j) return s;
          return int64_t(-1);
        };
        int64_t s0 = find_slot(env), sp = find_slot(ep), sm = find_slot(em);
        if (s0 < 0 || sp < 0 || sm < 0) continue;  // out of range
        const double r = env.vec[i][s0].norm().item<double>();
        if (r > kRcut - 1e-3) continue;
        (r > kRcutSmth ? checked_smooth : checked_inner)++;
        for (int a = 0; a < 4; ++a) {
          const double fd = (ep.rij[i][sp][a].item<double>() - em.rij[i][sm][a].item<double>()) / (2 * h);
          const double an = env.drij[i][s0][a][b].item<double>();
          EXPECT_NEAR(fd, an, 1e-7 * std::max(1.0, std::abs(an))) << "i " << i << " j " << j << " a " << a << " b " << b;
        }
      }
    }
  EXPECT_GT(checked_smooth, 20);
  EXPECT_GT(checked_inner, 2);
}

TEST(EnvMatrix, GoesContinuouslyToZeroAtRcut) {
  auto p = params({1, 1});
  double prev = 1e300;
  for (double eps : {1e-1, 1e-2, 1e-3, 1e-4, 1e-5}) {
    Frame f;
    f.pos = {0, 0, 0, kRcut - eps, 0, 0};
    f.types = {0, 1};
    f.pbc = {{false, false, false}};
    EnvMatrix env = env_of<double>(f, p);
    const double r0 = env.rij[0][1][0].item<double>();
    const double g0 = env.drij[0][1][0][0].item<double>();
    // w ~ 10 (eps/width)^3 near rcut: R and dR/dd vanish with eps.
    const double width = kRcut - kRcutSmth;
    EXPECT_NEAR(r0, 10 * std::pow(eps / width, 3) / kRcut, 20 * std::pow(eps / width, 4));
    EXPECT_LT(std::abs(g0), 31 * std::pow(eps / width, 2) / width + 1e-12);
    EXPECT_LT(r0, prev);
    prev = r0;
  }
  Frame f;
  f.pos = {0, 0, 0, kRcut, 0, 0};  // exactly at rcut: indistinguishable from an empty slot
  f.types = {0, 1};
  f.pbc = {{false, false, false}};
  EnvMatrix env = env_of<double>(f, p);
  EXPECT_EQ(env.rij.abs().sum().item<double>(), 0.0);
}

TEST(EnvMatrix, StatisticsOnAHandComputedCase) {
  // Two atoms (O at 0, H at (1,0,0)), sel [1, 2] -> 3 slots, r = 1 < rcut_smth: w = 1.
  // O centre: slot0 empty (no O neighbour), slot1 = H: R = (1, 1, 0, 0), slot2 empty.
  // H centre: slot0 = O: R = (1, -1, 0, 0), slots 1-2 empty.
  auto p = params({1, 2});
  p.rcut_smth = 1.5;
  Frame f;
  f.pos = {0, 0, 0, 1, 0, 0};
  f.types = {0, 1};
  f.pbc = {{false, false, false}};
  std::vector<double> pos = f.pos;
  auto nl = build_neighbor_list<double>(pos.data(), 2, nullptr, f.pbc, p.rcut);
  EnvMatrix env = compute_env_matrix<double>(nl, f.types, p);
  mlip::models::EnvStat stat(2, 3);
  stat.add(env, f.types);
  stat.add(env, f.types);  // a second identical frame changes nothing
  auto davg = stat.davg(), dstd = stat.dstd();
  // Per type: column 0 values {1, 0, 0}: mean 1/3, std sqrt(1/3 - 1/9) = sqrt(2)/3.
  // Columns 1-3 pooled: {±1, 0, ... (9 values)}: mean ±1/9, var 1/9 - 1/81 = 8/81.
  for (int t = 0; t < 2; ++t) {
    EXPECT_NEAR(davg[t][0].item<double>(), 1.0 / 3.0, 1e-15);
    for (int a = 1; a < 4; ++a) EXPECT_EQ(davg[t][a].item<double>(), 0.0);
    EXPECT_NEAR(dstd[t][0].item<double>(), std::sqrt(2.0) / 3.0, 1e-15);
    for (int a = 1; a < 4; ++a) EXPECT_NEAR(dstd[t][a].item<double>(), std::sqrt(8.0) / 9.0, 1e-15);
  }
  EXPECT_EQ(stat.count(0), 2);
  // A type never seen keeps davg 0 and dstd 1; a tiny std is raised to 1e-2.
  mlip::models::EnvStat empty(3, 3);
  empty.add(env, f.types);
  EXPECT_EQ(empty.dstd()[2][0].item<double>(), 1.0);
  Frame far;
  far.pos = {0, 0, 0, 100, 0, 0};
  far.types = {0, 1};
  far.pbc = f.pbc;
  auto nl2 = build_neighbor_list<double>(far.pos.data(), 2, nullptr, far.pbc, p.rcut);
  mlip::models::EnvStat flat(2, 3);
  flat.add(compute_env_matrix<double>(nl2, far.types, p), far.types);
  EXPECT_EQ(flat.dstd()[0][0].item<double>(), 1e-2);
}

TEST(EnvMatrix, RejectsInconsistentInput) {
  std::vector<double> pos = {0, 0, 0, 1, 0, 0};
  auto nl = build_neighbor_list<double>(pos.data(), 2, nullptr, {{false, false, false}}, kRcut);
  EXPECT_THROW(compute_env_matrix<double>(nl, {0}, params({1, 1})), mlip::Error);
  EXPECT_THROW(compute_env_matrix<double>(nl, {0, 2}, params({1, 1})), mlip::Error);
  auto bad = params({1, 1});
  bad.rcut_smth = 5.0;
  try {
    compute_env_matrix<double>(nl, {0, 1}, bad);
    FAIL();
  } catch (const mlip::Error& e) {
    EXPECT_NE(std::string(e.what()).find("descriptor.rcut_smth"), std::string::npos);
  }
}

}  // namespace
