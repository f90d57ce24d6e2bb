#include "data/neighbor_list.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "error.h"

namespace {

using mlip::data::build_neighbor_list;
using mlip::data::NeighborListOptions;
using Key = std::tuple<int, int, int, int, int>;  // i, j, shift

struct Structure {
  std::string name;
  std::vector<double> pos;  // [n, 3]
  std::vector<double> cell;  // [9] or empty
  std::array<bool, 3> pbc;
  double cutoff;
  int natoms() const { return int(pos.size() / 3); }
};

/// Random atoms in the cell, some placed up to one cell outside (unwrapped input).
Structure random_structure(const std::string& name, std::vector<double> cell, std::array<bool, 3> pbc,
                           int n, double cutoff, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-0.3, 1.3);
  Structure s{name, {}, cell, pbc, cutoff};
  for (int i = 0; i < n; ++i) {
    double f[3] = {u(rng), u(rng), u(rng)};
    for (int c = 0; c < 3; ++c) {
      double v = 0;
      for (int d = 0; d < 3; ++d) v += f[d] * (cell.empty() ? (d == c ? 10.0 : 0.0) : cell[3 * d + c]);
      s.pos.push_back(v);
    }
  }
  return s;
}

std::vector<Structure> structures() {
  std::vector<Structure> out;
  const std::array<bool, 3> all{{true, true, true}}, none{{false, false, false}}, slab{{true, true, false}};
  out.push_back(random_structure("cubic", {9, 0, 0, 0, 9, 0, 0, 0, 9}, all, 80, 3.5, 1));
  out.push_back(random_structure("orthorhombic_large", {14, 0, 0, 0, 11, 0, 0, 0, 17}, all, 150, 4.0, 2));
  out.push_back(random_structure("triclinic", {8, 0, 0, 2.5, 7, 0, -1.5, 2, 9}, all, 70, 3.8, 3));
  out.push_back(random_structure("strongly_skewed", {6, 0, 0, 5.5, 2.5, 0, 5.0, 2.0, 2.2}, all, 40, 3.0, 4));
  out.push_back(random_structure("cell_smaller_than_cutoff", {2.1, 0, 0, 0.3, 2.6, 0, 0.2, -0.4, 1.9}, all, 5, 5.0, 5));
  out.push_back(random_structure("one_atom_tiny_cell", {1.5, 0, 0, 0, 1.7, 0, 0, 0, 1.6}, all, 1, 4.0, 6));
  out.push_back(random_structure("non_periodic_cluster", {}, none, 60, 4.0, 7));
  out.push_back(random_structure("non_periodic_with_cell", {7, 0, 0, 1, 8, 0, 0, 0, 9}, none, 50, 3.5, 8));
  out.push_back(random_structure("slab", {7, 0, 0, 2, 6.5, 0, 0, 0, 12}, slab, 60, 4.0, 9));
  out.push_back(random_structure("thin_slab_small_cell", {2.5, 0, 0, 0, 3.0, 0, 0.5, 0.5, 8}, slab, 8, 4.5, 10));
  out.push_back(random_structure("wire", {12, 0, 0, 0, 12, 0, 0, 0, 3.0}, {{false, false, true}}, 20, 4.0, 11));
  // A slab whose non-periodic cell vector is zero (as some converters write it).
  auto z = random_structure("slab_zero_c", {6, 0, 0, 1, 6, 0, 0, 0, 10}, slab, 40, 3.5, 12);
  z.cell[6] = z.cell[7] = z.cell[8] = 0.0;
  out.push_back(z);
  return out;
}

/// O(N^2) over explicit images: every (i, j, shift) with |r_j - r_i + shift * cell| < cutoff.
std::map<Key, std::array<double, 3>> brute_force(const Structure& s) {
  std::map<Key, std::array<double, 3>> pairs;
  const int n = s.natoms();
  int range[3] = {0, 0, 0};
  if (!s.cell.empty()) {
    // Heights of the cell; a zero (non-periodic) cell vector is replaced by the unit normal.
    std::array<std::array<double, 3>, 3> h;
    for (int d = 0; d < 3; ++d) h[d] = {s.cell[3 * d], s.cell[3 * d + 1], s.cell[3 * d + 2]};
    auto cross = [](const std::array<double, 3>& a, const std::array<double, 3>& b) {
      return std::array<double, 3>{a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
    };
    auto norm = [](const std::array<double, 3>& a) { return std::sqrt(a[0] * a[0] + a[1] * a[1] + a[2] * a[2]); };
    for (int d = 0; d < 3; ++d)
      if (norm(h[d]) == 0) {
        auto c = cross(h[(d + 1) % 3], h[(d + 2) % 3]);
        double nc = norm(c);
        for (double& x : c) x /= nc;
        h[d] = c;
      }
    const double vol = std::abs(h[0][0] * (h[1][1] * h[2][2] - h[1][2] * h[2][1]) -
                                h[0][1] * (h[1][0] * h[2][2] - h[1][2] * h[2][0]) +
                                h[0][2] * (h[1][0] * h[2][1] - h[1][1] * h[2][0]));
    for (int d = 0; d < 3; ++d) {
      if (!s.pbc[d]) continue;
      const double height = vol / norm(cross(h[(d + 1) % 3], h[(d + 2) % 3]));
      range[d] = int(std::ceil(s.cutoff / height)) + 3;  // + the spread of unwrapped positions
    }
  }
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      for (int a = -range[0]; a <= range[0]; ++a)
        for (int b = -range[1]; b <= range[1]; ++b)
          for (int c = -range[2]; c <= range[2]; ++c) {
            if (i == j && a == 0 && b == 0 && c == 0) continue;
            std::array<double, 3> d;
            for (int k = 0; k < 3; ++k) {
              d[k] = s.pos[3 * j + k] - s.pos[3 * i + k];
              if (!s.cell.empty()) d[k] += a * s.cell[k] + b * s.cell[3 + k] + c * s.cell[6 + k];
            }
            if (d[0] * d[0] + d[1] * d[1] + d[2] * d[2] < s.cutoff * s.cutoff) pairs[{i, j, a, b, c}] = d;
          }
  return pairs;
}

template <typename Real>
class NeighborListTest : public ::testing::Test {};
using RealTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(NeighborListTest, RealTypes);

template <typename Real>
void compare_with_brute_force(const Structure& s, const NeighborListOptions& options) {
  SCOPED_TRACE(s.name);
  std::vector<Real> pos(s.pos.begin(), s.pos.end());
  // Brute force on the positions as the list sees them (rounded to Real).
  Structure rounded = s;
  for (size_t k = 0; k < pos.size(); ++k) rounded.pos[k] = double(pos[k]);
  auto expected = brute_force(rounded);

  auto nl = build_neighbor_list<Real>(pos.data(), s.natoms(), s.cell.empty() ? nullptr : s.cell.data(),
                                      s.pbc, s.cutoff, options);
  auto offsets = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.offsets);
  auto neighbor = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.neighbor);
  auto shift = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.shift);
  auto vec = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.vector);
  auto dist = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.distance);
  ASSERT_EQ(offsets(0), 0);
  ASSERT_EQ(offsets(s.natoms()), nl.npairs());

  // Pairs within this band of the cutoff may fall either side in Real arithmetic.
  const double band = std::is_same<Real, float>::value ? 1e-4 : 1e-10;
  const double vec_tol = std::is_same<Real, float>::value ? 5e-5 : 1e-11;
  std::map<Key, int> found;
  for (int i = 0; i < s.natoms(); ++i)
    for (int64_t p = offsets(i); p < offsets(i + 1); ++p) {
      Key key{i, neighbor(p), shift(p, 0), shift(p, 1), shift(p, 2)};
      ASSERT_EQ(found.count(key), 0u) << "duplicate pair " << i << "-" << neighbor(p);
      found[key] = 1;
      for (int d = 0; d < 3; ++d) {
        if (!s.pbc[d]) {
          EXPECT_EQ(shift(p, d), 0) << "shift in a non-periodic direction";
        }
      }
      double r2 = 0;
      for (int k = 0; k < 3; ++k) r2 += double(vec(p, k)) * double(vec(p, k));
      EXPECT_NEAR(std::sqrt(r2), double(dist(p)), vec_tol);
      EXPECT_LT(double(dist(p)), s.cutoff);
      auto it = expected.find(key);
      if (it == expected.end()) {
        EXPECT_GT(double(dist(p)), s.cutoff - band) << "pair " << i << "-" << neighbor(p) << " not in brute force";
        continue;
      }
      for (int k = 0; k < 3; ++k) EXPECT_NEAR(double(vec(p, k)), it->second[k], vec_tol);
    }
  for (const auto& [key, d] : expected) {
    if (found.count(key)) continue;
    double r = std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
    EXPECT_GT(r, s.cutoff - band) << "missing pair " << std::get<0>(key) << "-" << std::get<1>(key) << " shift "
                                  << std::get<2>(key) << " " << std::get<3>(key) << " " << std::get<4>(key)
                                  << " at r = " << r;
  }
  EXPECT_GT(expected.size(), 0u);
}

TYPED_TEST(NeighborListTest, MatchesBruteForceOnEveryKindOfCell) {
  for (const auto& s : structures()) compare_with_brute_force<TypeParam>(s, {});
}

TYPED_TEST(NeighborListTest, IndependentOfBinSize) {
  for (int k : {1, 2, 3, 5})
    for (const auto& s : structures()) {
      NeighborListOptions o;
      o.bins_per_cutoff = k;
      compare_with_brute_force<TypeParam>(s, o);
    }
}

TYPED_TEST(NeighborListTest, ManyRandomSkewedCells) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int trial = 0; trial < 25; ++trial) {
    std::vector<double> cell(9);
    for (int d = 0; d < 3; ++d)
      for (int k = 0; k < 3; ++k) cell[3 * d + k] = (d == k ? 4.0 + 3.0 * std::abs(u(rng)) : 0.0) + 2.5 * u(rng);
    std::array<bool, 3> pbc{{u(rng) > -0.6, u(rng) > -0.6, u(rng) > -0.6}};
    auto s = random_structure("random_" + std::to_string(trial), cell, pbc, 12 + trial, 2.5 + 2.0 * std::abs(u(rng)),
                              100 + trial);
    compare_with_brute_force<TypeParam>(s, {});
  }
}

TYPED_TEST(NeighborListTest, ReusedBuilderEqualsFreshBuilds) {
  // One builder over structures that grow and shrink: each list equals a fresh build.
  mlip::data::NeighborListBuilder<TypeParam> builder;
  auto all = structures();
  std::vector<Structure> sequence = {all[1], all[4], all[0], all[6], all[1], all[8]};
  for (const auto& s : sequence) {
    SCOPED_TRACE(s.name);
    std::vector<TypeParam> pos(s.pos.begin(), s.pos.end());
    const double* cell = s.cell.empty() ? nullptr : s.cell.data();
    auto reused = builder.build(pos.data(), s.natoms(), cell, s.pbc, s.cutoff);
    auto fresh = build_neighbor_list<TypeParam>(pos.data(), s.natoms(), cell, s.pbc, s.cutoff);
    ASSERT_EQ(reused.npairs(), fresh.npairs());
    // Host copies of both lists (their Views live in Kokkos' default memory space).
    auto host = [](const auto& view) { return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), view); };
    const auto ro = host(reused.offsets), fo = host(fresh.offsets);
    const auto rn = host(reused.neighbor), fn = host(fresh.neighbor);
    const auto rd = host(reused.distance), fd = host(fresh.distance);
    const auto rs = host(reused.shift), fs = host(fresh.shift);
    const auto rv = host(reused.vector), fv = host(fresh.vector);
    for (int i = 0; i <= s.natoms(); ++i) ASSERT_EQ(ro(i), fo(i));
    for (int64_t p = 0; p < fresh.npairs(); ++p) {
      ASSERT_EQ(rn(p), fn(p));
      ASSERT_EQ(rd(p), fd(p));
      for (int k = 0; k < 3; ++k) {
        ASSERT_EQ(rs(p, k), fs(p, k));
        ASSERT_EQ(rv(p, k), fv(p, k));
      }
    }
  }
}

TEST(NeighborList, EmptyAndIsolatedAtoms) {
  auto nl = build_neighbor_list<double>(nullptr, 0, nullptr, {{false, false, false}}, 3.0);
  EXPECT_EQ(nl.npairs(), 0);
  std::vector<double> far = {0, 0, 0, 100, 0, 0};
  auto nl2 = build_neighbor_list<double>(far.data(), 2, nullptr, {{false, false, false}}, 3.0);
  EXPECT_EQ(nl2.npairs(), 0);
}

TEST(NeighborList, RejectsBadInput) {
  std::vector<double> pos = {0, 0, 0, 1, 0, 0};
  EXPECT_THROW(build_neighbor_list<double>(pos.data(), 2, nullptr, {{true, true, true}}, 3.0), mlip::Error);
  std::vector<double> cell = {1, 0, 0, 2, 0, 0, 0, 0, 1};  // singular
  try {
    build_neighbor_list<double>(pos.data(), 2, cell.data(), {{true, true, true}}, 3.0);
    FAIL() << "singular cell accepted";
  } catch (const mlip::Error& e) {
    EXPECT_NE(std::string(e.what()).find("singular cell"), std::string::npos) << e.what();
  }
  EXPECT_THROW(build_neighbor_list<double>(pos.data(), 2, nullptr, {{false, false, false}}, -1.0), mlip::Error);
  pos[3] = std::nan("");
  EXPECT_THROW(build_neighbor_list<double>(pos.data(), 2, nullptr, {{false, false, false}}, 3.0), mlip::Error);
}

}  // namespace
