#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "data/deepmd_system.h"
#include "data/load.h"
#include "data/npy.h"
#include "error.h"
#include "test_util.h"

namespace fs = std::filesystem;
using mlip::data::load_systems;
using mlip::data::read_deepmd_system;
using mlip::data::System;
using mlip::data::validate_system;
using mlip::data::write_npy;
using mlip::test::TempDir;
using mlip::test::write_text;

namespace {

/// Deterministic distinct values: base + index.
std::vector<double> seq(int64_t n, double base) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = base + 0.5 * static_cast<double>(i);
  return v;
}

std::vector<double> cubic_boxes(int64_t nf, double a) {
  std::vector<double> b;
  for (int64_t f = 0; f < nf; ++f) {
    std::vector<double> c = {a, 0, 0, 0, a, 0, 0, 0, a};
    b.insert(b.end(), c.begin(), c.end());
  }
  return b;
}

/// Writes set folder `set` of a system with natoms atoms and nf frames; values offset by `base`.
void write_set(const std::string& dir, const std::string& set, int64_t nf, int64_t natoms,
               double base, bool labels = true, bool virial = false, bool box = true) {
  const std::string s = dir + "/" + set;
  fs::create_directories(s);
  write_npy(s + "/coord.npy", {nf, 3 * natoms}, seq(nf * 3 * natoms, base));
  if (box) write_npy(s + "/box.npy", {nf, 9}, cubic_boxes(nf, 10 + base));
  if (labels) {
    write_npy(s + "/energy.npy", {nf}, seq(nf, -100 - base));
    write_npy(s + "/force.npy", {nf, 3 * natoms}, seq(nf * 3 * natoms, 1000 + base));
  }
  if (virial) write_npy(s + "/virial.npy", {nf, 9}, seq(nf * 9, 2000 + base));
}

using mlip::test::contains;
using mlip::test::error_of;

/// A valid one-frame periodic system, for validate_system tests.
System small_system() {
  System s;
  s.name = "sys";
  s.type_map = {"O", "H"};
  s.types = {0, 1, 1};
  s.nframes = 2;
  s.coord = seq(18, 0.1);
  s.box = cubic_boxes(2, 5);
  s.energy = {-1, -2};
  s.force = seq(18, 0.2);
  s.virial = seq(18, 0.3);
  return s;
}

}  // namespace

TEST(DeepmdSystem, ReadsTwoSetsConcatenatedInOrder) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_text(dir + "/type.raw", "0 1 1\n");
  write_text(dir + "/type_map.raw", "O H\n");
  // Written in reverse order: reading must still go set.000 then set.001.
  write_set(dir, "set.001", 3, 3, 100);
  write_set(dir, "set.000", 2, 3, 0);

  System s = read_deepmd_system(dir, {"O", "H"});
  EXPECT_EQ(s.name, dir);
  EXPECT_EQ(s.natoms(), 3);
  EXPECT_EQ(s.nframes, 5);
  EXPECT_EQ(s.types, (std::vector<int>{0, 1, 1}));
  EXPECT_EQ(s.type_map, (std::vector<std::string>{"O", "H"}));
  EXPECT_EQ(s.pbc, (std::array<bool, 3>{true, true, true}));

  std::vector<double> coord = seq(2 * 9, 0);
  std::vector<double> c1 = seq(3 * 9, 100);
  coord.insert(coord.end(), c1.begin(), c1.end());
  EXPECT_EQ(s.coord, coord);
  std::vector<double> energy = seq(2, -100);
  std::vector<double> e1 = seq(3, -200);
  energy.insert(energy.end(), e1.begin(), e1.end());
  EXPECT_EQ(s.energy, energy);
  ASSERT_EQ(s.force.size(), 45u);
  EXPECT_EQ(s.force[0], 1000);
  EXPECT_EQ(s.force[18], 1100);
  ASSERT_EQ(s.box.size(), 45u);
  EXPECT_EQ(s.frame_box(1)[0], 10);
  EXPECT_EQ(s.frame_box(2)[0], 110);
  EXPECT_EQ(s.frame_coord(2)[0], 100);
  EXPECT_TRUE(s.virial.empty());
}

TEST(DeepmdSystem, RemapsTypeMapRawOntoModelTypeMap) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_text(dir + "/type.raw", "0 1 1 0\n");
  write_text(dir + "/type_map.raw", "H O\n");
  write_set(dir, "set.000", 1, 4, 0);

  System s = read_deepmd_system(dir, {"O", "H"});
  EXPECT_EQ(s.types, (std::vector<int>{1, 0, 0, 1}));
  EXPECT_EQ(s.type_map, (std::vector<std::string>{"O", "H"}));

  // A model type_map with extra elements.
  System t = read_deepmd_system(dir, {"C", "H", "N", "O"});
  EXPECT_EQ(t.types, (std::vector<int>{1, 3, 3, 1}));

  // No model type_map: the system's own names.
  System u = read_deepmd_system(dir, {});
  EXPECT_EQ(u.types, (std::vector<int>{0, 1, 1, 0}));
  EXPECT_EQ(u.type_map, (std::vector<std::string>{"H", "O"}));
}

TEST(DeepmdSystem, UnusedTypeMapRawNamesNeedNotBeInModel) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_text(dir + "/type.raw", "1 0\n");
  write_text(dir + "/type_map.raw", "O H Pt\n");
  write_set(dir, "set.000", 1, 2, 0);
  System s = read_deepmd_system(dir, {"H", "O"});
  EXPECT_EQ(s.types, (std::vector<int>{0, 1}));
}

TEST(DeepmdSystem, NameAbsentFromModelTypeMapIsAnError) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_text(dir + "/type.raw", "0 1 2\n");
  write_text(dir + "/type_map.raw", "O H C\n");
  write_set(dir, "set.000", 1, 3, 0);
  std::string msg = error_of([&] { read_deepmd_system(dir, {"O", "H"}); });
  EXPECT_TRUE(contains(msg, dir + "/type_map.raw")) << msg;
  EXPECT_TRUE(contains(msg, "'C'")) << msg;
  EXPECT_TRUE(contains(msg, "[O, H]")) << msg;
}

TEST(DeepmdSystem, WithoutTypeMapRawIdsIndexTheModelTypeMap) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_text(dir + "/type.raw", "1\n0\n1\n");  // one per line works too
  write_set(dir, "set.000", 1, 3, 0);
  System s = read_deepmd_system(dir, {"O", "H"});
  EXPECT_EQ(s.types, (std::vector<int>{1, 0, 1}));
  EXPECT_EQ(s.type_map, (std::vector<std::string>{"O", "H"}));
  System t = read_deepmd_system(dir, {});
  EXPECT_EQ(t.type_map, (std::vector<std::string>{"type_0", "type_1"}));
  std::string msg = error_of([&] { read_deepmd_system(dir, {"O"}); });
  EXPECT_TRUE(contains(msg, dir + "/type.raw")) << msg;
  EXPECT_TRUE(contains(msg, "type id 1 is out of range")) << msg;
}

TEST(DeepmdSystem, NopbcHasNoBoxAndIgnoresBoxFile) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_text(dir + "/type.raw", "0 1 1\n");
  write_text(dir + "/nopbc", "");
  write_set(dir, "set.000", 2, 3, 0, true, false, /*box=*/false);
  System s = read_deepmd_system(dir, {"O", "H"});
  EXPECT_EQ(s.pbc, (std::array<bool, 3>{false, false, false}));
  EXPECT_FALSE(s.has_box());
  EXPECT_EQ(s.frame_box(0), nullptr);
  EXPECT_NO_THROW(validate_system(s));

  // A box.npy next to nopbc (even a malformed one) is ignored.
  write_npy(dir + "/set.000/box.npy", {2, 4}, seq(8, 0));
  System t = read_deepmd_system(dir, {"O", "H"});
  EXPECT_FALSE(t.has_box());
  EXPECT_EQ(t.nframes, 2);
}

TEST(DeepmdSystem, LabelsAreOptional) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_text(dir + "/type.raw", "0 1 1\n");
  write_set(dir, "set.000", 2, 3, 0, /*labels=*/false);
  System s = read_deepmd_system(dir, {"O", "H"});
  EXPECT_TRUE(s.energy.empty());
  EXPECT_TRUE(s.force.empty());
  EXPECT_TRUE(s.virial.empty());
  EXPECT_EQ(s.coord.size(), 18u);
}

TEST(DeepmdSystem, VirialIsReadWhenPresent) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_text(dir + "/type.raw", "0 1 1\n");
  write_set(dir, "set.000", 2, 3, 0, true, /*virial=*/true);
  write_set(dir, "set.001", 1, 3, 50, true, /*virial=*/true);
  System s = read_deepmd_system(dir, {"O", "H"});
  ASSERT_EQ(s.virial.size(), 27u);
  EXPECT_EQ(s.virial[0], 2000);
  EXPECT_EQ(s.virial[18], 2050);
}

TEST(DeepmdSystem, LabelInOnlySomeSetsIsAnError) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_text(dir + "/type.raw", "0 1 1\n");
  write_set(dir, "set.000", 2, 3, 0, true, /*virial=*/true);
  write_set(dir, "set.001", 1, 3, 50, true, /*virial=*/false);
  std::string msg = error_of([&] { read_deepmd_system(dir, {"O", "H"}); });
  EXPECT_TRUE(contains(msg, dir + "/set.001/virial.npy: not found, but set.000 has virial.npy"))
      << msg;
}

TEST(DeepmdSystem, AcceptsDeepmdShapeVariants) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_text(dir + "/type.raw", "0 1 1\n");
  const std::string s = dir + "/set.000";
  fs::create_directories(s);
  write_npy(s + "/coord.npy", {2, 3, 3}, seq(18, 0));  // [nf, N, 3]
  write_npy(s + "/box.npy", {2, 3, 3}, cubic_boxes(2, 9));
  write_npy(s + "/energy.npy", {2, 1}, {-1, -2});  // [nf, 1]
  write_npy(s + "/force.npy", {2, 9}, seq(18, 1));
  System a = read_deepmd_system(dir, {"O", "H"});
  EXPECT_EQ(a.nframes, 2);
  EXPECT_EQ(a.energy, (std::vector<double>{-1, -2}));

  // A single frame stored flat.
  write_npy(s + "/coord.npy", {9}, seq(9, 0));
  write_npy(s + "/box.npy", {9}, cubic_boxes(1, 9));
  write_npy(s + "/energy.npy", {1}, {-1});
  write_npy(s + "/force.npy", {9}, seq(9, 1));
  System b = read_deepmd_system(dir, {"O", "H"});
  EXPECT_EQ(b.nframes, 1);
  EXPECT_EQ(b.coord, seq(9, 0));
}

TEST(DeepmdSystem, ReadsFloat32BigEndianFortranCoordinates) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_text(dir + "/type.raw", "0 1\n");
  write_set(dir, "set.000", 2, 2, 0);
  // coord [2, 6] as big-endian float32 in Fortran order: values 0..11 (C order) stored
  // column-major.
  std::string data;
  for (int j = 0; j < 6; ++j) {
    for (int i = 0; i < 2; ++i) {
      float v = static_cast<float>(i * 6 + j);
      unsigned char b[4];
      std::memcpy(b, &v, 4);
      const uint16_t probe = 1;
      const bool host_little = *reinterpret_cast<const unsigned char*>(&probe) == 1;
      for (int k = 0; k < 4; ++k) data.push_back(static_cast<char>(b[host_little ? 3 - k : k]));
    }
  }
  std::string header = "{'descr': '>f4', 'fortran_order': True, 'shape': (2, 6), }";
  const size_t total = 10 + header.size() + 1;
  header.append((total + 63) / 64 * 64 - total, ' ');
  header.push_back('\n');
  std::string image = std::string("\x93NUMPY\x01\x00", 8);
  image.push_back(static_cast<char>(header.size()));
  image.push_back(0);
  write_text(dir + "/set.000/coord.npy", image + header + data);
  System s = read_deepmd_system(dir, {"O", "H"});
  std::vector<double> expected(12);
  for (int i = 0; i < 12; ++i) expected[i] = i;
  EXPECT_EQ(s.coord, expected);
}

TEST(DeepmdSystem, ShapeMismatchNamesFileAndShapes) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_text(dir + "/type.raw", "0 1 1\n");
  write_set(dir, "set.000", 2, 3, 0);
  write_npy(dir + "/set.000/force.npy", {2, 6}, seq(12, 0));
  std::string msg = error_of([&] { read_deepmd_system(dir, {"O", "H"}); });
  EXPECT_TRUE(contains(msg, dir + "/set.000/force.npy: expected shape [2, 9]")) << msg;
  EXPECT_TRUE(contains(msg, "natoms 3 from type.raw")) << msg;
  EXPECT_TRUE(contains(msg, "got [2, 6]")) << msg;

  write_set(dir, "set.000", 2, 3, 0);
  write_npy(dir + "/set.000/coord.npy", {2, 6}, seq(12, 0));
  msg = error_of([&] { read_deepmd_system(dir, {"O", "H"}); });
  EXPECT_TRUE(contains(msg, dir + "/set.000/coord.npy: expected shape [nframes, 9] "
                                  "(nframes x 3*natoms, natoms 3 from type.raw), got [2, 6]"))
      << msg;

  write_set(dir, "set.000", 2, 3, 0);
  write_npy(dir + "/set.000/energy.npy", {3}, {1, 2, 3});
  msg = error_of([&] { read_deepmd_system(dir, {"O", "H"}); });
  EXPECT_TRUE(contains(msg, dir + "/set.000/energy.npy: expected shape [2] (nframes 2 from "
                                  "coord.npy), got [3]"))
      << msg;

  write_set(dir, "set.000", 2, 3, 0);
  write_npy(dir + "/set.000/box.npy", {3, 9}, cubic_boxes(3, 5));
  msg = error_of([&] { read_deepmd_system(dir, {"O", "H"}); });
  EXPECT_TRUE(contains(msg, dir + "/set.000/box.npy: expected shape [2, 9]")) << msg;
  EXPECT_TRUE(contains(msg, "got [3, 9]")) << msg;
}

TEST(DeepmdSystem, StructuralErrors) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_text(dir + "/type.raw", "0 1 1\n");
  std::string msg = error_of([&] { read_deepmd_system(dir, {"O", "H"}); });
  EXPECT_TRUE(contains(msg, dir + ": no set.* folder")) << msg;

  fs::create_directories(dir + "/set.000");
  msg = error_of([&] { read_deepmd_system(dir, {"O", "H"}); });
  EXPECT_TRUE(contains(msg, dir + "/set.000/coord.npy: not found")) << msg;

  write_set(dir, "set.000", 1, 3, 0, true, false, /*box=*/false);
  msg = error_of([&] { read_deepmd_system(dir, {"O", "H"}); });
  EXPECT_TRUE(contains(msg, dir + "/set.000/box.npy: not found")) << msg;
  EXPECT_TRUE(contains(msg, "nopbc")) << msg;

  write_text(dir + "/type.raw", "0 1 x\n");
  msg = error_of([&] { read_deepmd_system(dir, {"O", "H"}); });
  EXPECT_TRUE(contains(msg, dir + "/type.raw: expected a non-negative integer type id for atom 2, "
                                  "got 'x'"))
      << msg;

  write_text(dir + "/type.raw", "");
  msg = error_of([&] { read_deepmd_system(dir, {"O", "H"}); });
  EXPECT_TRUE(contains(msg, dir + "/type.raw")) << msg;
  EXPECT_TRUE(contains(msg, "empty")) << msg;

  fs::remove(dir + "/type.raw");
  msg = error_of([&] { read_deepmd_system(dir, {"O", "H"}); });
  EXPECT_TRUE(contains(msg, dir + "/type.raw: not found")) << msg;
}

TEST(LoadSystems, SearchesSubFoldersRecursivelyInSortedOrder) {
  TempDir tmp;
  for (const char* name : {"b/sys2", "a/sys1", "a/sys0"}) {
    const std::string dir = tmp / name;
    write_text(dir + "/type.raw", "0 1\n");
    write_text(dir + "/type_map.raw", "O H\n");
    write_set(dir, "set.000", 1, 2, 0);
  }
  std::vector<std::string> type_map = {"O", "H"};
  std::vector<System> systems = load_systems({tmp.path()}, type_map);
  ASSERT_EQ(systems.size(), 3u);
  EXPECT_EQ(systems[0].name, tmp / "a/sys0");
  EXPECT_EQ(systems[1].name, tmp / "a/sys1");
  EXPECT_EQ(systems[2].name, tmp / "b/sys2");
}

TEST(LoadSystems, FillsTypeMapFromTheData) {
  TempDir tmp;
  write_text(tmp / "s1/type.raw", "0 1 1\n");
  write_text(tmp / "s1/type_map.raw", "O H\n");
  write_set(tmp / "s1", "set.000", 1, 3, 0);
  write_text(tmp / "s2/type.raw", "0 1 2\n");
  write_text(tmp / "s2/type_map.raw", "C H O\n");
  write_set(tmp / "s2", "set.000", 1, 3, 0);
  std::vector<std::string> type_map;
  std::vector<System> systems = load_systems({"s1", "s2"}, type_map, tmp.path());
  EXPECT_EQ(type_map, (std::vector<std::string>{"O", "H", "C"}));
  ASSERT_EQ(systems.size(), 2u);
  EXPECT_EQ(systems[0].types, (std::vector<int>{0, 1, 1}));
  EXPECT_EQ(systems[1].types, (std::vector<int>{2, 1, 0}));
  EXPECT_EQ(systems[1].type_map, type_map);
}

TEST(LoadSystems, RelativePathsUseBaseDir) {
  TempDir tmp;
  write_text(tmp / "data/sys/type.raw", "0\n");
  write_set(tmp / "data/sys", "set.000", 1, 1, 0);
  std::vector<std::string> type_map = {"O"};
  std::vector<System> systems = load_systems({"data/sys"}, type_map, tmp.path());
  ASSERT_EQ(systems.size(), 1u);
  EXPECT_EQ(systems[0].natoms(), 1);
  EXPECT_EQ(systems[0].name, tmp / "data/sys");  // full path, for messages
  systems = load_systems({"./data/../data/sys/"}, type_map, tmp.path());
  EXPECT_EQ(systems[0].name, tmp / "data/sys");
  // Absolute paths ignore base_dir.
  systems = load_systems({tmp / "data"}, type_map, "/nonexistent");
  EXPECT_EQ(systems.size(), 1u);
}

TEST(LoadSystems, PathErrors) {
  TempDir tmp;
  std::vector<std::string> type_map = {"O", "H"};
  std::string msg = error_of([&] { load_systems({tmp / "missing"}, type_map); });
  EXPECT_TRUE(contains(msg, tmp / "missing" + ": no such file or folder")) << msg;

  msg = error_of([&] { load_systems({"missing"}, type_map, tmp.path()); });
  EXPECT_TRUE(contains(msg, tmp / "missing")) << msg;
  EXPECT_TRUE(contains(msg, "data path 'missing'")) << msg;

  fs::create_directories(tmp / "empty/deeper");
  msg = error_of([&] { load_systems({tmp / "empty"}, type_map); });
  EXPECT_TRUE(contains(msg, tmp / "empty" + ": no DeePMD system found")) << msg;
  EXPECT_TRUE(contains(msg, "type.raw")) << msg;

  write_set(tmp / "notype", "set.000", 1, 2, 0);
  msg = error_of([&] { load_systems({tmp / "notype"}, type_map); });
  EXPECT_TRUE(contains(msg, "has set.* folders but no type.raw")) << msg;

  write_text(tmp / "data.txt", "hello");
  msg = error_of([&] { load_systems({tmp / "data.txt"}, type_map); });
  EXPECT_TRUE(contains(msg, tmp / "data.txt")) << msg;
  EXPECT_TRUE(contains(msg, ".xyz")) << msg;
}

TEST(LoadSystems, ValidatesEverySystem) {
  TempDir tmp;
  write_text(tmp / "sys/type.raw", "0 1 1\n");
  write_set(tmp / "sys", "set.000", 2, 3, 0);
  std::vector<double> coord = seq(18, 0);
  coord[9 + 2 * 3 + 1] = std::numeric_limits<double>::quiet_NaN();  // frame 1, atom 2, y
  write_npy(tmp / "sys/set.000/coord.npy", {2, 9}, coord);
  std::vector<std::string> type_map = {"O", "H"};
  std::string msg = error_of([&] { load_systems({tmp / "sys"}, type_map); });
  EXPECT_TRUE(contains(msg, tmp / "sys")) << msg;
  EXPECT_TRUE(contains(msg, "frame 1, atom 2: coordinate y is NaN")) << msg;
}

TEST(ValidateSystem, AcceptsAValidSystem) { EXPECT_NO_THROW(validate_system(small_system())); }

TEST(ValidateSystem, RejectsNonFiniteValues) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  {
    System s = small_system();
    s.coord[9 + 3] = inf;  // frame 1, atom 1, x
    std::string msg = error_of([&] { validate_system(s); });
    EXPECT_TRUE(contains(msg, "system sys: frame 1, atom 1: coordinate x is Inf")) << msg;
  }
  {
    System s = small_system();
    s.energy[1] = nan;
    EXPECT_TRUE(contains(error_of([&] { validate_system(s); }), "frame 1: energy is NaN"));
  }
  {
    System s = small_system();
    s.force[5] = -inf;
    EXPECT_TRUE(contains(error_of([&] { validate_system(s); }), "frame 0, atom 1: force z is Inf"));
  }
  {
    System s = small_system();
    s.virial[12] = nan;
    EXPECT_TRUE(contains(error_of([&] { validate_system(s); }), "frame 1: virial"));
  }
  {
    System s = small_system();
    s.box[4] = nan;
    EXPECT_TRUE(contains(error_of([&] { validate_system(s); }), "frame 0: cell"));
  }
}

TEST(ValidateSystem, RejectsSingularOrMissingCells) {
  {
    System s = small_system();
    s.box = {5, 0, 0, 0, 5, 0, 0, 0, 5, 5, 0, 0, 10, 0, 0, 0, 0, 5};  // frame 1: a || b
    std::string msg = error_of([&] { validate_system(s); });
    EXPECT_TRUE(contains(msg, "system sys: frame 1: singular cell")) << msg;
  }
  {
    System s = small_system();
    s.box[8] = 0;  // frame 0: c = 0
    std::string msg = error_of([&] { validate_system(s); });
    EXPECT_TRUE(contains(msg, "frame 0: cell vector 2 is zero in a periodic direction")) << msg;
  }
  {
    // Zero c in a non-periodic direction is fine for a slab.
    System s = small_system();
    s.pbc = {true, true, false};
    s.box[8] = 0;
    s.box[17] = 0;
    EXPECT_NO_THROW(validate_system(s));
    s.box[9 + 3] = 5;  // frame 1: b = (5, 5, 0), a = (5, 0, 0): still independent
    EXPECT_NO_THROW(validate_system(s));
    s.box[9 + 4] = 0;  // frame 1: b = (5, 0, 0) || a
    EXPECT_TRUE(contains(error_of([&] { validate_system(s); }), "frame 1: singular cell"));
  }
  {
    System s = small_system();
    s.box.clear();
    std::string msg = error_of([&] { validate_system(s); });
    EXPECT_TRUE(contains(msg, "periodic")) << msg;
    EXPECT_TRUE(contains(msg, "no cell")) << msg;
    s.pbc = {false, false, false};
    EXPECT_NO_THROW(validate_system(s));
  }
}

TEST(WaterData, LoadsDataOneWithTwoSets) {
  const std::string water = mlip::test::shared_water_dir();
  if (water.empty()) {
    GTEST_SKIP() << "shared water data not found (expected " << MLIP_SHARED_DATA
                 << "/water/data_0/type.raw); skipping the real-data test";
  }
  const std::string dir = water + "/data_1";
  int64_t expected_frames = 0;
  int nsets = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_directory() && e.path().filename().string().rfind("set.", 0) == 0) {
      expected_frames += mlip::data::read_npy(e.path().string() + "/coord.npy").shape[0];
      ++nsets;
    }
  }
  EXPECT_EQ(nsets, 2);

  std::vector<std::string> type_map = {"O", "H"};
  std::vector<System> systems = load_systems({dir}, type_map);
  ASSERT_EQ(systems.size(), 1u);
  const System& s = systems[0];
  EXPECT_EQ(s.natoms(), 192);
  EXPECT_EQ(std::count(s.types.begin(), s.types.end(), 0), 64);
  EXPECT_EQ(std::count(s.types.begin(), s.types.end(), 1), 128);
  EXPECT_EQ(s.nframes, expected_frames);
  EXPECT_EQ(static_cast<int64_t>(s.coord.size()), expected_frames * 192 * 3);
  EXPECT_EQ(static_cast<int64_t>(s.force.size()), expected_frames * 192 * 3);
  EXPECT_EQ(static_cast<int64_t>(s.energy.size()), expected_frames);
  EXPECT_EQ(static_cast<int64_t>(s.box.size()), expected_frames * 9);
  EXPECT_TRUE(s.pbc[0] && s.pbc[1] && s.pbc[2]);

  // Cross-check the frame count and one value with numpy when available.
  auto r = mlip::test::run_command(
      std::string(MLIP_TEST_PYTHON) + " -c \"import numpy as np, glob; "
      "fs = sorted(glob.glob('" + dir + "/set.*/coord.npy')); "
      "print(sum(np.load(f).shape[0] for f in fs), repr(float(np.load(fs[-1])[-1, -1])))\"");
  if (r.exit_code == 0) {
    std::string expected = std::to_string(expected_frames) + " ";
    EXPECT_EQ(r.out.substr(0, expected.size()), expected) << r.out;
    const double last = std::stod(r.out.substr(expected.size()));
    EXPECT_EQ(s.coord.back(), last);
  }

  // The whole water folder: every data_* system, sorted.
  std::vector<std::string> empty_map;
  std::vector<System> all = load_systems({water}, empty_map);
  EXPECT_EQ(empty_map, (std::vector<std::string>{"O", "H"}));
  ASSERT_GE(all.size(), 2u);
  EXPECT_EQ(all[1].name, dir);
}

// ---- Files that change under a streamed system (docs/data.md "Files that change during
// training"): every change is an error naming the file and the frame, before any value of it
// is used; special files are refused at start, and never block.

namespace {

/// A .npy of float32 values (the header as numpy writes it), for a file rewritten with
/// another dtype.
void write_npy_float32(const std::string& path, const std::vector<int64_t>& shape, const std::vector<double>& values) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) dict += (i ? ", " : "") + std::to_string(shape[i]);
  dict += shape.size() == 1 ? ",), }" : "), }";
  while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
  bytes += char(dict.size() & 0xff);
  bytes += char(dict.size() >> 8);
  bytes += dict;
  for (double v : values) {
    const float f = float(v);
    bytes.append(reinterpret_cast<const char*>(&f), 4);
  }
  write_text(path, bytes);
}

/// Puts `make(temporary path)`'s file in place of `path` as a copy moved over it would.
void replace_file(const std::string& path, const std::function<void(const std::string&)>& make) {
  const std::string tmp = path + ".new";
  make(tmp);
  fs::rename(tmp, path);
}

/// A streamed system of 3 atoms and 4 frames in tmp/sys, frame 1 read once.
System streamed_system(const TempDir& tmp) {
  write_text(tmp / "sys/type.raw", "0 1 1\n");
  write_set(tmp / "sys", "set.000", 4, 3, 0);
  System s = mlip::data::open_deepmd_system(tmp / "sys", {"O", "H"});
  const std::vector<double> all = seq(36, 0);
  EXPECT_EQ(s.frame(1).coord, std::vector<double>(all.begin() + 9, all.begin() + 18));
  return s;
}

}  // namespace

TEST(StreamedChanges, ReplacedFilesAreNamedErrorsWithTheFrame) {
  struct Case {
    const char* what;
    std::function<void(const std::string&)> make;  // writes the new coord.npy
    const char* change;                            // what the message says changed
  };
  const std::vector<Case> cases = {
      {"same shape, other values", [](const std::string& p) { write_npy(p, {4, 9}, seq(36, 7)); },
       "replaced by another file"},
      {"more frames", [](const std::string& p) { write_npy(p, {6, 9}, seq(54, 0)); }, "size 416 -> 560 bytes"},
      {"other dtype", [](const std::string& p) { write_npy_float32(p, {4, 9}, seq(36, 0)); }, "size 416 -> 272 bytes"},
      {"garbage", [](const std::string& p) { write_text(p, std::string(416, '\x7f')); }, "replaced by another file"},
  };
  for (const Case& c : cases) {
    TempDir tmp;
    const System s = streamed_system(tmp);
    const std::string coord = tmp / "sys/set.000/coord.npy";
    replace_file(coord, c.make);
    const std::string msg = error_of([&] { s.frame(2); });
    EXPECT_TRUE(contains(msg, tmp / "sys: frame 2 (row 2 of " + tmp / "sys/set.000): " + coord +
                                  ": changed since it was opened at start ("))
        << c.what << ": " << msg;
    EXPECT_TRUE(contains(msg, c.change)) << c.what << ": " << msg;
  }
}

TEST(StreamedChanges, FilesChangedInPlaceAreNamedErrors) {
  TempDir tmp;
  const System s = streamed_system(tmp);
  // Cut short in place (the same file, fewer bytes): once the frame's bytes were past its end.
  const std::string force = tmp / "sys/set.000/force.npy";
  fs::resize_file(force, 200);
  std::string msg = error_of([&] { s.frame(3); });
  EXPECT_TRUE(contains(msg, tmp / "sys: frame 3 (row 3 of ")) << msg;
  EXPECT_TRUE(contains(msg, force + ": changed since it was opened at start (size 416 -> 200 bytes")) << msg;
  // Rewritten in place with the same size, later.
  TempDir tmp2;
  const System s2 = streamed_system(tmp2);
  const std::string energy = tmp2 / "sys/set.000/energy.npy";
  write_npy(energy, {4}, seq(4, 5));
  const struct timespec later[2] = {{0, UTIME_OMIT}, {2000000000, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, energy.c_str(), later, 0), 0);
  msg = error_of([&] { s2.frame(0); });
  EXPECT_TRUE(contains(msg, tmp2 / "sys: frame 0 (row 0 of ")) << msg;
  EXPECT_TRUE(contains(msg, energy + ": changed since it was opened at start (modified ")) << msg;
  EXPECT_TRUE(contains(msg, "-> 2033-05-18 03:33:20.000000000 UTC)")) << msg;
}

TEST(StreamedChanges, AFifoIsRefusedAtStartAndWhenItReplacesAFile) {
  TempDir tmp;
  const System s = streamed_system(tmp);
  const std::string box = tmp / "sys/set.000/box.npy";
  fs::remove(box);
  ASSERT_EQ(mkfifo(box.c_str(), 0600), 0);
  // No writer ever opens the FIFO: a read that opened it blocking would hang here.
  std::string msg = error_of([&] { s.frame(1); });
  EXPECT_TRUE(contains(msg, tmp / "sys: frame 1 (row 1 of ")) << msg;
  EXPECT_TRUE(contains(msg, box + ": changed since it was opened at start (now a FIFO (named pipe), was a regular "
                                  "file)"))
      << msg;
  // At start: the .npy, type.raw and type_map.raw.
  msg = error_of([&] { mlip::data::open_deepmd_system(tmp / "sys", {"O", "H"}); });
  EXPECT_TRUE(contains(msg, box + ": is a FIFO (named pipe), expected a regular file")) << msg;
  fs::remove(box);
  fs::remove(tmp / "sys/type.raw");
  ASSERT_EQ(mkfifo((tmp / "sys/type.raw").c_str(), 0600), 0);
  msg = error_of([&] { mlip::data::open_deepmd_system(tmp / "sys", {"O", "H"}); });
  EXPECT_TRUE(contains(msg, tmp / "sys/type.raw: is a FIFO (named pipe), expected a regular file")) << msg;
  fs::remove(tmp / "sys/type.raw");  // (writing into the FIFO would wait for a reader)
  write_text(tmp / "sys/type.raw", "0 1 1\n");
  ASSERT_EQ(mkfifo((tmp / "sys/type_map.raw").c_str(), 0600), 0);
  msg = error_of([&] { mlip::data::open_deepmd_system(tmp / "sys", {"O", "H"}); });
  EXPECT_TRUE(contains(msg, tmp / "sys/type_map.raw: is a FIFO (named pipe), expected a regular file")) << msg;
}

TEST(StreamedChanges, ANonFiniteValueNamesTheFileRowOfItsFrame) {
  TempDir tmp;
  write_text(tmp / "sys/type.raw", "0 1 1\n");
  write_set(tmp / "sys", "set.000", 2, 3, 0);
  write_set(tmp / "sys", "set.001", 2, 3, 10);
  std::vector<double> coord = seq(18, 10);
  coord[9 + 4] = std::numeric_limits<double>::quiet_NaN();  // row 1 of set.001, atom 1, y
  write_npy(tmp / "sys/set.001/coord.npy", {2, 9}, coord);
  const System s = mlip::data::open_deepmd_system(tmp / "sys", {"O", "H"});
  const std::string msg = error_of([&] { s.frame(3); });
  EXPECT_TRUE(contains(msg, "system " + tmp / "sys: frame 3, atom 1: coordinate y is NaN, expected a finite number "
                                               "(frame 3 is row 1 of " + tmp / "sys/set.001)"))
      << msg;
}

TEST(StreamedChanges, AFrameBeyondTheSystemIsNamed) {
  TempDir tmp;
  const System s = streamed_system(tmp);
  const std::string msg = error_of([&] { s.reader->read(4); });
  EXPECT_TRUE(contains(msg, tmp / "sys: frame 4: beyond the system's 4 frames")) << msg;
}

// Label keys (docs/data.md "Label keys"): labels stored as <key>.npy read, with the keys, as the
// default names do; a key whose file is missing, or a stress key, is an error naming the set.
TEST(DeepmdSystem, LabelsUnderTheirOwnKeys) {
  TempDir tmp;
  const std::string plain = tmp / "plain", named = tmp / "named";
  for (const std::string& dir : {plain, named}) {
    write_text(dir + "/type.raw", "0 1 1\n");
    write_text(dir + "/type_map.raw", "O H\n");
    write_set(dir, "set.000", 2, 3, 0, true, true);
  }
  for (const char* label : {"energy", "force", "virial"})
    fs::rename(named + "/set.000/" + label + ".npy", named + "/set.000/REF_" + label + ".npy");
  mlip::data::LabelKeys keys;
  keys.energy = "REF_energy", keys.forces = "REF_force", keys.virial = "REF_virial";
  const System a = read_deepmd_system(plain, {"O", "H"}), b = read_deepmd_system(named, {"O", "H"}, keys);
  EXPECT_EQ(a.energy, b.energy);
  EXPECT_EQ(a.force, b.force);
  EXPECT_EQ(a.virial, b.virial);
  ASSERT_EQ(b.virial.size(), 18u);
  // Without the keys the labels are absent (they are optional in DeePMD systems) ...
  EXPECT_TRUE(read_deepmd_system(named, {"O", "H"}).energy.empty());
  // ... but a label a key names must be there.
  keys.energy = "DFT_energy";
  const std::string msg = error_of([&] { read_deepmd_system(named, {"O", "H"}, keys); });
  EXPECT_TRUE(contains(msg, named + "/set.000: energy_key 'DFT_energy': no DFT_energy.npy here")) << msg;
  mlip::data::LabelKeys stress;
  stress.stress = "REF_stress";
  EXPECT_TRUE(contains(error_of([&] { read_deepmd_system(named, {"O", "H"}, stress); }),
                       "stress_key 'REF_stress': DeePMD systems keep virials"));
}

// Per-atom charge labels (docs/long_range.md "Charge labels"): charge.npy [nframes, natoms] of
// every set, in memory and streamed alike; under charges_key; a wrong shape, a set without them
// and a non-finite charge are named errors.
TEST(DeepmdSystem, ChargeLabelsAreReadFromEverySet) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_text(dir + "/type.raw", "0 1 1\n");
  write_set(dir, "set.000", 2, 3, 0);
  write_set(dir, "set.001", 1, 3, 50);
  write_npy(dir + "/set.000/charge.npy", {2, 3}, seq(6, -0.8));
  write_npy(dir + "/set.001/charge.npy", {1, 3}, seq(3, 0.3));
  const System s = read_deepmd_system(dir, {"O", "H"});
  EXPECT_TRUE(s.has_charge);
  std::vector<double> expected = seq(6, -0.8);
  for (double q : seq(3, 0.3)) expected.push_back(q);
  EXPECT_EQ(s.charge, expected);
  EXPECT_EQ(s.frame(2).charge, seq(3, 0.3));
  std::vector<std::string> type_map = {"O", "H"};
  const auto streamed = load_systems({dir}, type_map, "", mlip::data::Loading::kStreamed);
  ASSERT_EQ(streamed.size(), 1u);
  EXPECT_TRUE(streamed[0].has_charge);
  for (int64_t f = 0; f < 3; ++f) EXPECT_EQ(streamed[0].frame(f).charge, s.frame(f).charge) << "frame " << f;

  // Under another name: only with charges_key, which then must be there.
  fs::rename(dir + "/set.000/charge.npy", dir + "/set.000/q_hirshfeld.npy");
  fs::rename(dir + "/set.001/charge.npy", dir + "/set.001/q_hirshfeld.npy");
  EXPECT_FALSE(read_deepmd_system(dir, {"O", "H"}).has_charge);
  mlip::data::LabelKeys keys;
  keys.charges = "q_hirshfeld";
  EXPECT_EQ(read_deepmd_system(dir, {"O", "H"}, keys).charge, expected);
  keys.charges = "q_bader";
  std::string msg = error_of([&] { read_deepmd_system(dir, {"O", "H"}, keys); });
  EXPECT_TRUE(contains(msg, dir + "/set.000: charges_key 'q_bader': no q_bader.npy here")) << msg;

  // In one set only; of the wrong shape; not finite.
  fs::rename(dir + "/set.000/q_hirshfeld.npy", dir + "/set.000/charge.npy");
  msg = error_of([&] { read_deepmd_system(dir, {"O", "H"}); });
  EXPECT_TRUE(contains(msg, dir + "/set.001/charge.npy: not found, but set.000 has charge.npy")) << msg;
  write_npy(dir + "/set.001/charge.npy", {1, 2}, seq(2, 0.3));
  msg = error_of([&] { read_deepmd_system(dir, {"O", "H"}); });
  EXPECT_TRUE(contains(msg, dir + "/set.001/charge.npy: expected shape [1, 3] (nframes 1 from coord.npy x natoms, "
                            "natoms 3 from type.raw), got [1, 2]"))
      << msg;
  std::vector<double> bad = seq(3, 0.3);
  bad[1] = std::nan("");
  write_npy(dir + "/set.001/charge.npy", {1, 3}, bad);
  msg = error_of([&] { read_deepmd_system(dir, {"O", "H"}); });
  EXPECT_TRUE(contains(msg, "frame 2, atom 1: charge is NaN, expected a finite number")) << msg;
}
