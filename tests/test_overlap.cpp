// data::find_overlap (docs/data.md "Overlapping atoms") against brute force over periodic images,
// and validate_frame's error naming the system, frame and atoms in the file's order.
#include "data/overlap.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "data/kokkos_runtime.h"
#include "data/system.h"
#include "error.h"
#include "test_util.h"

namespace {

using mlip::test::Frame;

/// The closest pair (over images shift in [-2, 2]^3 of the periodic directions), brute force.
double brute_force_closest(const Frame& f) {
  double best = std::numeric_limits<double>::infinity();
  const int n = f.natoms();
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      for (int a = -2; a <= 2; ++a)
        for (int b = -2; b <= 2; ++b)
          for (int c = -2; c <= 2; ++c) {
            if (i == j && a == 0 && b == 0 && c == 0) continue;
            if (f.cell.empty() && (a || b || c)) continue;
            double d2 = 0;
            for (int k = 0; k < 3; ++k) {
              double d = f.pos[size_t(j * 3 + k)] - f.pos[size_t(i * 3 + k)];
              if (!f.cell.empty()) d += a * f.cell[size_t(k)] + b * f.cell[size_t(3 + k)] + c * f.cell[size_t(6 + k)];
              d2 += d * d;
            }
            best = std::min(best, std::sqrt(d2));
          }
  return best;
}

TEST(Overlap, FoundExactlyWhenBruteForceFindsOne) {
  for (bool periodic : {true, false}) {
    for (unsigned seed = 1; seed <= 4; ++seed) {
      SCOPED_TRACE((periodic ? "periodic, seed " : "cluster, seed ") + std::to_string(seed));
      Frame f = mlip::test::random_frame(40, periodic, seed, 7.0, {0.9, -0.7, 0.4}, 0.8, 0.4);
      const double* cell = f.cell.empty() ? nullptr : f.cell.data();
      const std::array<bool, 3> pbc = periodic ? f.pbc : std::array<bool, 3>{{false, false, false}};
      ASSERT_GT(brute_force_closest(f), mlip::data::kOverlapDistance);
      EXPECT_FALSE(mlip::data::find_overlap(f.pos.data(), f.natoms(), cell, pbc));
      // Atom 17 moved onto atom 4 (periodic: onto an image of 4, one cell vector away, plus a bit).
      for (int k = 0; k < 3; ++k)
        f.pos[size_t(17 * 3 + k)] = f.pos[size_t(4 * 3 + k)] + (periodic ? f.cell[size_t(3 + k)] : 0.0) + (k == 0 ? 3e-4 : 0.0);
      const double closest = brute_force_closest(f);
      const auto o = mlip::data::find_overlap(f.pos.data(), f.natoms(), cell, pbc);
      ASSERT_TRUE(o);
      EXPECT_EQ(o->i, 4);
      EXPECT_EQ(o->j, 17);
      EXPECT_NEAR(o->distance, closest, 1e-12);
      EXPECT_NEAR(o->distance, 3e-4, 1e-9);
      if (periodic) EXPECT_EQ(o->shift, (std::array<int, 3>{{0, -1, 0}}));
    }
  }
}

TEST(Overlap, SafeBesideOtherThreadsBuildingNeighbourLists) {
  // The trainer's workers check frames while others build a model's neighbour list (under
  // data::kokkos_mutex); Kokkos' Serial space shares its reduction scratch between threads.
  Frame f = mlip::test::random_frame(60, true, 9, 8.0, {0.5, 0.2, -0.3}, 0.8, 0.4);
  for (int k = 0; k < 3; ++k) f.pos[size_t(30 * 3 + k)] = f.pos[size_t(12 * 3 + k)] + (k == 1 ? 2e-4 : 0.0);
  const auto expected = mlip::data::find_overlap(f.pos.data(), f.natoms(), f.cell.data(), f.pbc);
  ASSERT_TRUE(expected);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&] {
      for (int r = 0; r < 40; ++r) {
        const auto o = mlip::data::find_overlap(f.pos.data(), f.natoms(), f.cell.data(), f.pbc);
        if (!o || o->i != expected->i || o->j != expected->j || o->distance != expected->distance) ++wrong;
      }
    });
  threads.emplace_back([&] {
    for (int r = 0; r < 40; ++r) {
      std::lock_guard<std::mutex> lock(mlip::data::kokkos_mutex());
      const auto list = mlip::data::build_neighbor_list<double>(f.pos.data(), f.natoms(), f.cell.data(), f.pbc, 4.0);
      if (list.npairs() == 0) ++wrong;
    }
  });
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(Overlap, ValidateFrameNamesSystemFrameAndAtomsInTheFilesOrder) {
  mlip::data::System s;
  s.name = "water";
  s.type_map = {"O", "H"};
  s.types = {0, 1, 1};  // sorted by type: atom a is the file's atom atom_order[a]
  s.atom_order = {2, 0, 1};
  s.pbc = {{false, false, false}};
  s.nframes = 1;
  mlip::data::Frame fr;
  fr.coord = {0, 0, 0, 1.0, 0, 0, 1.0, 0, 0};  // atoms 1 and 2 here: the file's 0 and 1
  const std::string e = mlip::test::error_of([&] { mlip::data::validate_frame(s, 3, fr); });
  EXPECT_TRUE(mlip::test::contains(e, "system water: frame 3: atoms 0 and 1 (counting from 0, in the file's order) are 0 Å apart"))
      << e;
  fr.coord[3] = 0.5;
  EXPECT_NO_THROW(mlip::data::validate_frame(s, 3, fr));
}

}  // namespace
