#include "data/neighbor_stat.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <regex>

#include "data/load.h"
#include "error.h"
#include "test_util.h"

namespace {

using mlip::data::System;

System small_cluster() {
  System s;
  s.name = "cluster";
  s.type_map = {"O", "H"};
  s.types = {0, 1, 1};
  s.pbc = {{false, false, false}};
  s.nframes = 1;
  s.coord = {0, 0, 0, 1.0, 0, 0, 2.5, 0, 0};
  return s;
}

TEST(NeighborStat, HandCountedCluster) {
  auto st = mlip::data::neighbor_stat({small_cluster()}, 2, 2.0);
  EXPECT_DOUBLE_EQ(st.min_distance, 1.0);
  // O: one H within 2 Å; H(1): the O and the other H; H(2): one H.
  EXPECT_EQ(st.max_neighbors, (std::vector<int64_t>{1, 1}));
  auto st3 = mlip::data::neighbor_stat({small_cluster()}, 2, 3.0);
  EXPECT_EQ(st3.max_neighbors, (std::vector<int64_t>{1, 2}));
}

TEST(NeighborStat, OverlappingAtomsAreAnError) {
  System s = small_cluster();
  s.coord[3] = 1e-5;
  try {
    mlip::data::neighbor_stat({s}, 2, 2.0);
    FAIL() << "overlap not detected";
  } catch (const mlip::Error& e) {
    EXPECT_NE(std::string(e.what()).find("overlapping atoms: cluster frame 0 atoms"), std::string::npos) << e.what();
  }
}

/// Independent O(N^2) count over the 27 (or more) images of a periodic frame.
void brute_force(const System& s, double rcut, double& min_dist, std::vector<int64_t>& max_nb) {
  const int64_t n = s.natoms();
  for (int64_t f = 0; f < s.nframes; ++f) {
    const double* x = s.frame_coord(f);
    const double* h = s.frame_box(f);
    ASSERT_NE(h, nullptr);
    // The water boxes are orthorhombic: images needed per direction from the box lengths.
    int range[3];
    for (int d = 0; d < 3; ++d) range[d] = int(std::ceil(rcut / h[4 * d])) + 1;
    for (int64_t i = 0; i < n; ++i) {
      std::vector<int64_t> cnt(max_nb.size(), 0);
      for (int64_t j = 0; j < n; ++j)
        for (int a = -range[0]; a <= range[0]; ++a)
          for (int b = -range[1]; b <= range[1]; ++b)
            for (int c = -range[2]; c <= range[2]; ++c) {
              if (i == j && a == 0 && b == 0 && c == 0) continue;
              double r2 = 0;
              for (int k = 0; k < 3; ++k) {
                double d = x[3 * j + k] - x[3 * i + k] + a * h[k] + b * h[3 + k] + c * h[6 + k];
                r2 += d * d;
              }
              if (r2 < rcut * rcut) {
                ++cnt[size_t(s.types[size_t(j)])];
                min_dist = std::min(min_dist, std::sqrt(r2));
              }
            }
      for (size_t t = 0; t < cnt.size(); ++t) max_nb[t] = std::max(max_nb[t], cnt[t]);
    }
  }
}

TEST(NeighborStat, WaterDataMatchesBruteForceAndTheCli) {
  const std::string water = mlip::test::shared_water_dir();
  if (water.empty()) GTEST_SKIP() << "../shared/data/water is absent (it is not part of a user's clone)";
  std::vector<std::string> type_map = {"O", "H"};
  auto systems = mlip::data::load_systems({water}, type_map);
  ASSERT_EQ(systems.size(), 4u);
  double bf_min = 1e300;
  std::vector<int64_t> bf_max(2, 0);
  for (auto& s : systems) brute_force(s, 6.0, bf_min, bf_max);
  auto st = mlip::data::neighbor_stat(systems, 2, 6.0);
  EXPECT_EQ(st.frames, 400);
  EXPECT_EQ(st.max_neighbors, bf_max);
  EXPECT_NEAR(st.min_distance, bf_min, 1e-12);

  auto r = mlip::test::run_command(std::string(MLIP_EXE) + " neighbor-stat -s " + water + " -r 6 -t O H");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(max_nbor_size: \[(\d+), (\d+)\])"))) << r.out;
  EXPECT_EQ(std::stoll(m[1]), bf_max[0]);
  EXPECT_EQ(std::stoll(m[2]), bf_max[1]);
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(min_nbor_dist: ([0-9.]+))"))) << r.out;
  EXPECT_NEAR(std::stod(m[1]), bf_min, 1e-6);
}

}  // namespace
