#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "data/extxyz.h"
#include "data/extxyz_writer.h"
#include "data/load.h"
#include "error.h"
#include "test_util.h"

using mlip::data::load_systems;
using mlip::data::read_extxyz;
using mlip::data::System;
using mlip::test::TempDir;
using mlip::test::write_text;

namespace {

using mlip::test::contains;
using mlip::test::error_of;

const char* kLattice = "Lattice=\"10.0 0.0 0.0 0.0 11.0 0.0 0.0 0.0 12.0\" ";
const char* kProps = "Properties=species:S:1:pos:R:3:forces:R:3 ";

/// A water molecule frame written as ASE does, atoms in the order O H H (or as given).
std::string water_frame(double shift, const std::string& extra = "pbc=\"T T T\"",
                        const std::string& order = "OHH") {
  std::string s = "3\n" + std::string(kLattice) + kProps + "energy=" +
                  std::to_string(-14.0 - shift) + " " + extra + "\n";
  int h = 0;
  for (char c : order) {
    double x = c == 'O' ? 0.0 : (h++ == 0 ? 0.76 : -0.76);
    double fx = c == 'O' ? 0.1 : (h == 1 ? 0.2 : 0.3);
    s += std::string(1, c) + "  " + std::to_string(x + shift) + "  0.5  " +
         std::to_string(c == 'O' ? 0.12 : -0.47) + "  " + std::to_string(fx) + "  -0.1  0.05\n";
  }
  return s;
}

}  // namespace

TEST(Extxyz, ReadsAnAseStyleFile) {
  TempDir tmp;
  const std::string path = tmp / "water.xyz";
  write_text(path, water_frame(0) + water_frame(1));
  std::vector<System> systems = read_extxyz(path, {"O", "H"});
  ASSERT_EQ(systems.size(), 1u);
  const System& s = systems[0];
  EXPECT_EQ(s.name, path + "[O1H2]");
  EXPECT_EQ(s.nframes, 2);
  EXPECT_EQ(s.types, (std::vector<int>{0, 1, 1}));
  EXPECT_EQ(s.type_map, (std::vector<std::string>{"O", "H"}));
  EXPECT_EQ(s.pbc, (std::array<bool, 3>{true, true, true}));
  ASSERT_EQ(s.box.size(), 18u);
  EXPECT_EQ(s.box[0], 10.0);
  EXPECT_EQ(s.box[4], 11.0);
  EXPECT_EQ(s.box[8], 12.0);
  EXPECT_EQ(s.energy, (std::vector<double>{-14.0, -15.0}));
  ASSERT_EQ(s.coord.size(), 18u);
  EXPECT_DOUBLE_EQ(s.coord[3], 0.76);        // frame 0, atom 1, x
  EXPECT_DOUBLE_EQ(s.coord[9 + 3], 1.76);    // frame 1, atom 1, x
  EXPECT_DOUBLE_EQ(s.coord[9 + 8], -0.47);   // frame 1, atom 2, z
  EXPECT_DOUBLE_EQ(s.force[0], 0.1);
  EXPECT_DOUBLE_EQ(s.force[6], 0.3);
  EXPECT_TRUE(s.virial.empty());
}

TEST(Extxyz, SortsAtomsByTypeWithForcesFollowing) {
  TempDir tmp;
  const std::string path = tmp / "w.extxyz";
  // Second frame lists H O H: atoms must be reordered to O H H like the first frame.
  write_text(path, water_frame(0) + water_frame(0, "pbc=\"T T T\"", "HOH"));
  std::vector<System> systems = read_extxyz(path, {"O", "H"});
  ASSERT_EQ(systems.size(), 1u);
  const System& s = systems[0];
  EXPECT_EQ(s.types, (std::vector<int>{0, 1, 1}));
  // Frame 1 as written: H(x=0.76, f=0.2), O(x=0, f=0.1), H(x=-0.76, f=0.3).
  EXPECT_DOUBLE_EQ(s.coord[9 + 0], 0.0);
  EXPECT_DOUBLE_EQ(s.coord[9 + 3], 0.76);
  EXPECT_DOUBLE_EQ(s.coord[9 + 6], -0.76);
  EXPECT_DOUBLE_EQ(s.force[9 + 0], 0.1);
  EXPECT_DOUBLE_EQ(s.force[9 + 3], 0.2);
  EXPECT_DOUBLE_EQ(s.force[9 + 6], 0.3);
  EXPECT_DOUBLE_EQ(s.coord[9 + 2], 0.12);  // O keeps its own z

  // With type_map [H, O], the H atoms come first (stable: in file order).
  std::vector<System> swapped = read_extxyz(path, {"H", "O"});
  ASSERT_EQ(swapped.size(), 1u);
  EXPECT_EQ(swapped[0].types, (std::vector<int>{0, 0, 1}));
  EXPECT_DOUBLE_EQ(swapped[0].coord[9 + 0], 0.76);
  EXPECT_DOUBLE_EQ(swapped[0].coord[9 + 3], -0.76);
  EXPECT_DOUBLE_EQ(swapped[0].force[9 + 6], 0.1);
}

TEST(Extxyz, GroupsFramesByCompositionAndPeriodicity) {
  TempDir tmp;
  const std::string path = tmp / "mixed.xyz";
  const std::string methane =
      "5\n" + std::string(kLattice) + kProps + "energy=-24.0 pbc=\"T T T\"\n"
      "C 0 0 0 0 0 0\nH 0.6 0.6 0.6 0.1 0.1 0.1\nH -0.6 -0.6 0.6 0 0 0\n"
      "H -0.6 0.6 -0.6 0 0 0\nH 0.6 -0.6 -0.6 0 0 0\n";
  // A non-periodic water molecule (no Lattice) and a slab (T T F).
  const std::string cluster =
      "3\n" + std::string(kProps) + "energy=-13.0 pbc=\"F F F\"\n"
      "O 0 0 0 0 0 0\nH 1 0 0 0 0 0\nH 0 1 0 0 0 0\n";
  const std::string slab = water_frame(0.5, "pbc=\"T T F\"");
  write_text(path, water_frame(0) + methane + cluster + water_frame(2) + slab + cluster);

  std::vector<System> systems = read_extxyz(path, {});
  ASSERT_EQ(systems.size(), 4u);
  // type_map from the file: sorted element names.
  EXPECT_EQ(systems[0].type_map, (std::vector<std::string>{"C", "H", "O"}));
  EXPECT_EQ(systems[0].name, path + "[H2O1]");
  EXPECT_EQ(systems[0].nframes, 2);
  EXPECT_EQ(systems[0].types, (std::vector<int>{1, 1, 2}));
  EXPECT_EQ(systems[0].energy, (std::vector<double>{-14.0, -16.0}));

  EXPECT_EQ(systems[1].name, path + "[C1H4]");
  EXPECT_EQ(systems[1].natoms(), 5);
  EXPECT_EQ(systems[1].nframes, 1);
  EXPECT_EQ(systems[1].types, (std::vector<int>{0, 1, 1, 1, 1}));

  const System& c = systems[2];
  EXPECT_EQ(c.name, path + "[H2O1,pbc=FFF]");
  EXPECT_EQ(c.nframes, 2);
  EXPECT_EQ(c.pbc, (std::array<bool, 3>{false, false, false}));
  EXPECT_FALSE(c.has_box());

  const System& slab_sys = systems[3];
  EXPECT_EQ(slab_sys.pbc, (std::array<bool, 3>{true, true, false}));
  EXPECT_EQ(slab_sys.nframes, 1);
  ASSERT_EQ(slab_sys.box.size(), 9u);
  EXPECT_EQ(slab_sys.box[8], 12.0);
  for (const System& s : systems) EXPECT_NO_THROW(mlip::data::validate_system(s)) << s.name;
}

TEST(Extxyz, PbcDefaultsFollowAse) {
  TempDir tmp;
  const std::string path = tmp / "d.xyz";
  // No pbc key: periodic when Lattice is present, not otherwise.
  write_text(path, "1\n" + std::string(kLattice) + kProps + "energy=-1\nH 0 0 0 0 0 0\n"
                   "1\n" + kProps + "energy=-2\nH 0 0 0 0 0 0\n");
  std::vector<System> systems = read_extxyz(path, {"H"});
  ASSERT_EQ(systems.size(), 2u);
  EXPECT_EQ(systems[0].pbc, (std::array<bool, 3>{true, true, true}));
  EXPECT_TRUE(systems[0].has_box());
  EXPECT_EQ(systems[1].pbc, (std::array<bool, 3>{false, false, false}));
  EXPECT_FALSE(systems[1].has_box());
}

// A frame of one atom needs no forces (they are zero: a lone atom's energy does not depend on
// where it is), periodic or not, marked IsolatedAtom or not; two atoms do (Errors).
TEST(Extxyz, LoneAtomNeedsNoForces) {
  TempDir tmp;
  const std::string path = tmp / "lone.xyz";
  write_text(path, "1\n" + std::string(kLattice) + "Properties=species:S:1:pos:R:3 energy=-1\nH 0 0 0\n"
                   "1\nProperties=species:S:1:pos:R:3 energy=-2 pbc=\"F F F\"\nO 0 0 0\n");
  std::vector<System> systems = read_extxyz(path, {"O", "H"});
  ASSERT_EQ(systems.size(), 2u);
  for (const System& sys : systems) {
    EXPECT_TRUE(sys.has_energy);
    ASSERT_EQ(sys.force.size(), 3u) << sys.name;
    EXPECT_EQ(sys.force, std::vector<double>(3, 0.0)) << sys.name;
  }
  EXPECT_EQ(systems[0].energy, std::vector<double>{-1.0});
  EXPECT_EQ(systems[1].energy, std::vector<double>{-2.0});
}

TEST(Extxyz, SkipsExtraColumnsAndAcceptsForceName) {
  TempDir tmp;
  const std::string path = tmp / "extra.xyz";
  write_text(path,
             "2\nLattice=\"5 0 0 0 5 0 0 0 5\" "
             "Properties=species:S:1:pos:R:3:Z:I:1:masses:R:1:momenta:R:3:force:R:3:tags:I:1 "
             "energy=-3.5 free_energy=-3.6 pbc=\"T T T\"\n"
             "H 1 2 3 1 1.008 9 9 9 0.1 0.2 0.3 0\n"
             "O 4 5 6 8 15.999 9 9 9 0.4 0.5 0.6 1\n");
  std::vector<System> systems = read_extxyz(path, {"O", "H"});
  ASSERT_EQ(systems.size(), 1u);
  const System& s = systems[0];
  EXPECT_EQ(s.types, (std::vector<int>{0, 1}));
  EXPECT_EQ(s.coord, (std::vector<double>{4, 5, 6, 1, 2, 3}));
  EXPECT_EQ(s.force, (std::vector<double>{0.4, 0.5, 0.6, 0.1, 0.2, 0.3}));
  EXPECT_EQ(s.energy, (std::vector<double>{-3.5}));  // energy wins over free_energy
}

TEST(Extxyz, FreeEnergyIsUsedWithoutEnergy) {
  TempDir tmp;
  const std::string path = tmp / "fe.xyz";
  write_text(path, "1\n" + std::string(kProps) + "free_energy=-7.25\nH 0 0 0 0 0 0\n");
  EXPECT_EQ(read_extxyz(path, {"H"})[0].energy, (std::vector<double>{-7.25}));
}

TEST(Extxyz, VirialFromStressOrVirialKey) {
  TempDir tmp;
  const std::string path = tmp / "v.xyz";
  // Cell volume 10 * 11 * 12 = 1320.
  write_text(path, water_frame(0, "stress=\"0.001 0.0 0.0 0.0 0.002 0.0 0.0 0.0 0.003\" "
                                  "pbc=\"T T T\"") +
                       water_frame(0, "virial=\"1 2 3 4 5 6 7 8 9\" pbc=\"T T T\""));
  std::vector<System> systems = read_extxyz(path, {"O", "H"});
  ASSERT_EQ(systems.size(), 1u);
  const std::vector<double>& v = systems[0].virial;
  ASSERT_EQ(v.size(), 18u);
  EXPECT_DOUBLE_EQ(v[0], -1.32);
  EXPECT_DOUBLE_EQ(v[4], -2.64);
  EXPECT_DOUBLE_EQ(v[8], -3.96);
  EXPECT_DOUBLE_EQ(v[1], 0.0);
  EXPECT_EQ(std::vector<double>(v.begin() + 9, v.end()),
            (std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9}));

  // Virial on some frames of a composition but not others is an error.
  write_text(path, water_frame(0, "virial=\"1 2 3 4 5 6 7 8 9\" pbc=\"T T T\"") + water_frame(1));
  std::string msg = error_of([&] { read_extxyz(path, {"O", "H"}); });
  EXPECT_TRUE(contains(msg, path + ":6: frame has no virial/stress")) << msg;
}

TEST(Extxyz, WindowsLineEndingsAndTrailingBlankLines) {
  TempDir tmp;
  const std::string path = tmp / "crlf.xyz";
  write_text(path, "1\r\n" + std::string(kProps) + "energy=-1.5 pbc=\"F F F\"\r\n"
                   "H 0.5 0 0 0 0 1\r\n\r\n\n");
  std::vector<System> systems = read_extxyz(path, {"H"});
  ASSERT_EQ(systems.size(), 1u);
  EXPECT_EQ(systems[0].energy, (std::vector<double>{-1.5}));
  EXPECT_EQ(systems[0].force, (std::vector<double>{0, 0, 1}));
}

TEST(Extxyz, LoadSystemsFillsSortedTypeMap) {
  TempDir tmp;
  write_text(tmp / "w.xyz", water_frame(0) + water_frame(0, "pbc=\"T T T\"", "HOH"));
  std::vector<std::string> type_map;
  std::vector<System> systems = load_systems({"w.xyz"}, type_map, tmp.path());
  EXPECT_EQ(type_map, (std::vector<std::string>{"H", "O"}));
  ASSERT_EQ(systems.size(), 1u);
  EXPECT_EQ(systems[0].types, (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(systems[0].nframes, 2);

  // A DeePMD-style type_map given up front is honoured.
  std::vector<std::string> oh = {"O", "H"};
  systems = load_systems({tmp / "w.xyz"}, oh);
  EXPECT_EQ(systems[0].types, (std::vector<int>{0, 1, 1}));
}

TEST(Extxyz, Errors) {
  TempDir tmp;
  const std::string path = tmp / "bad.xyz";
  auto expect_error = [&](const std::string& text, const std::vector<std::string>& phrases) {
    write_text(path, text);
    std::string msg = error_of([&] { read_extxyz(path, {"O", "H"}); });
    for (const std::string& p : phrases) {
      EXPECT_TRUE(contains(msg, p)) << msg << "\n  missing: " << p;
    }
  };
  // Missing forces column (a one-atom frame needs none: see LoneAtomNeedsNoForces).
  expect_error("2\nLattice=\"5 0 0 0 5 0 0 0 5\" Properties=species:S:1:pos:R:3 energy=-1 "
               "pbc=\"T T T\"\nH 0 0 0\nH 1 0 0\n",
               {path + ":2", "no forces", "column 'forces' (or 'force') of type R and count 3", "(frame 0)"});
  // Missing energy.
  expect_error("1\n" + std::string(kProps) + "pbc=\"F F F\"\nH 0 0 0 0 0 0\n",
               {path + ":2", "no energy", "'energy'"});
  // Non-numeric coordinate.
  expect_error(water_frame(0) + "3\n" + kLattice + kProps + "energy=-1 pbc=\"T T T\"\n"
                   "O 0 0 0 0 0 0\nH 0 abc 0 0 0 0\nH 0 0 0 0 0 0\n",
               {path + ":9", "atom 1", "column 'pos'", "expected a number, got 'abc'"});
  // Non-numeric force.
  expect_error("1\n" + std::string(kProps) + "energy=-1\nH 0 0 0 0 x 0\n",
               {path + ":3", "column 'forces'", "got 'x'"});
  // Periodic without Lattice.
  expect_error("1\n" + std::string(kProps) + "energy=-1 pbc=\"T T F\"\nH 0 0 0 0 0 0\n",
               {path + ":2", "pbc", "T T F", "no Lattice"});
  // Atom count line larger than the atoms that follow (last frame).
  expect_error("4\n" + std::string(kProps) + "energy=-1\nH 0 0 0 0 0 0\nO 1 1 1 0 0 0\n",
               {path + ":1", "atom count line says 4 atoms", "ends after 2 atom lines"});
  // Atom count line smaller than the atoms that follow.
  expect_error("1\n" + std::string(kProps) + "energy=-1\nH 0 0 0 0 0 0\nO 1 1 1 0 0 0\n",
               {path + ":4", "expected the atom count of a frame", "got 'O 1 1 1 0 0 0'"});
  // Atom count too small, followed by another frame: the next count line is an atom line.
  expect_error("2\n" + std::string(kProps) + "energy=-1\nH 0 0 0 0 0 0\n" +
                   "1\n" + kProps + "energy=-1\nH 0 0 0 0 0 0\n",
               {path + ":4", "expected 7 columns", "got 1"});
  // Wrong number of columns.
  expect_error("1\n" + std::string(kProps) + "energy=-1\nH 0 0 0 0 0\n",
               {path + ":3", "expected 7 columns", "got 6"});
  // Count line not a number.
  expect_error("three\n" + std::string(kProps) + "energy=-1\n",
               {path + ":1", "expected the atom count", "got 'three'"});
  // Element not in the type_map.
  expect_error("1\n" + std::string(kProps) + "energy=-1\nC 0 0 0 0 0 0\n",
               {path + ":1", "element 'C' is not in the type_map [O, H]"});
  // Bad Lattice.
  expect_error("1\nLattice=\"5 0 0 0 5 0\" " + std::string(kProps) + "energy=-1\nH 0 0 0 0 0 0\n",
               {path + ":2", "key 'Lattice': expected 9 numbers, got 6"});
  // Bad energy and pbc values.
  expect_error("1\n" + std::string(kProps) + "energy=abc\nH 0 0 0 0 0 0\n",
               {path + ":2", "key 'energy': expected a number, got 'abc'"});
  expect_error("1\n" + std::string(kProps) + "energy=-1 pbc=\"T T\"\nH 0 0 0 0 0 0\n",
               {path + ":2", "key 'pbc'", "got 'T T'"});
  // Unterminated quote.
  expect_error("1\nLattice=\"5 0 0 0 5 0 0 0 5 " + std::string(kProps) + "\nH 0 0 0 0 0 0\n",
               {path + ":2", "unterminated"});
  // Empty file.
  expect_error("", {path, "no frames"});
  // Missing file.
  std::string msg = error_of([&] { read_extxyz(tmp / "none.xyz", {}); });
  EXPECT_TRUE(contains(msg, tmp / "none.xyz" + ": cannot open")) << msg;
}

// ---- A streamed extended XYZ file that changes (docs/data.md "Files that change during
// training").

TEST(Extxyz, StreamedFileChangedIsAnErrorNamingTheFrame) {
  TempDir tmp;
  const std::string path = tmp / "w.xyz";
  write_text(path, water_frame(0) + water_frame(1) + water_frame(2));
  std::vector<System> systems = mlip::data::open_extxyz(path, {"O", "H"});
  ASSERT_EQ(systems.size(), 1u);
  const System& s = systems[0];
  EXPECT_EQ(s.frame(1).energy, std::vector<double>{-15.0});
  // Replaced by a file of other values (the same size), then by one with a frame more.
  write_text(path + ".new", water_frame(3) + water_frame(4) + water_frame(5));
  std::filesystem::rename(path + ".new", path);
  std::string msg = error_of([&] { s.frame(2); });
  EXPECT_TRUE(contains(msg, s.name + ": frame 2 (line 11 of " + path + "): " + path +
                                ": changed since it was opened at start (replaced by another file"))
      << msg;
  // A FIFO in its place: refused, never waited on.
  std::filesystem::remove(path);
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  msg = error_of([&] { s.frame(0); });
  EXPECT_TRUE(contains(msg, s.name + ": frame 0 (line 1 of " + path + "): " + path +
                                ": changed since it was opened at start (now a FIFO"))
      << msg;
  // And at start.
  msg = error_of([&] { mlip::data::open_extxyz(path, {"O", "H"}); });
  EXPECT_TRUE(contains(msg, path + ": is a FIFO (named pipe), expected a regular file")) << msg;
}

// Label keys (docs/data.md "Label keys"): a file kept as MACE's users keep it (REF_energy,
// REF_forces, REF_stress) reads, with the keys, exactly as the same file with the default names;
// without them, the error names the file, the frame and the keys that are there.
TEST(Extxyz, LabelsUnderTheirOwnKeys) {
  TempDir tmp;
  const std::string plain = tmp / "plain.xyz", mace = tmp / "mace.xyz";
  const std::string stress = "stress=\"0.001 0.0004 0.0 0.0004 0.002 0.0 0.0 0.0 0.003\" pbc=\"T T T\"";
  const std::string text = water_frame(0, stress) + water_frame(1, stress, "HOH");
  write_text(plain, text);
  // The same frames with every label renamed, and decoys under the default names in the second.
  std::string renamed = text;
  auto replace_all = [&](const std::string& from, const std::string& to) {
    for (size_t at = renamed.find(from); at != std::string::npos; at = renamed.find(from, at + to.size()))
      renamed.replace(at, from.size(), to);
  };
  replace_all("energy=", "REF_energy=");
  replace_all("forces:R:3", "REF_forces:R:3");
  replace_all("stress=", "REF_stress=");
  write_text(mace, renamed);
  mlip::data::LabelKeys keys;
  keys.energy = "REF_energy", keys.forces = "REF_forces", keys.stress = "REF_stress";
  for (auto loading : {mlip::data::Loading::kInMemory, mlip::data::Loading::kStreamed}) {
    std::vector<std::string> names = {"O", "H"}, names2 = {"O", "H"};
    auto a = load_systems({plain}, names, "", loading);
    auto b = load_systems({mace}, names2, "", loading, keys);
    ASSERT_EQ(a.size(), 1u);
    ASSERT_EQ(b.size(), 1u);
    for (int64_t f = 0; f < 2; ++f) {
      const auto fa = a[0].frame(f), fb = b[0].frame(f);
      EXPECT_EQ(fa.energy, fb.energy);
      EXPECT_EQ(fa.force, fb.force);
      EXPECT_EQ(fa.virial, fb.virial);
      ASSERT_EQ(fb.virial.size(), 9u);
      EXPECT_DOUBLE_EQ(fb.virial[1], -0.0004 * 1320.0) << "virial = -stress * volume";
    }
  }
  // Without the keys: the file, the frame and the keys that are there.
  const std::string msg = error_of([&] { read_extxyz(mace, {"O", "H"}); });
  EXPECT_TRUE(contains(msg, mace + ":2 (frame 0): no energy")) << msg;
  EXPECT_TRUE(contains(msg, "REF_energy, REF_stress, pbc")) << msg;
  EXPECT_TRUE(contains(msg, "energy_key")) << msg;
  // A key that is not there, and forces under a name that is not a column.
  keys.energy = "DFT_energy";
  const std::string missing = error_of([&] { read_extxyz(mace, {"O", "H"}, keys); });
  EXPECT_TRUE(contains(missing, "expected the key 'DFT_energy' (energy_key)")) << missing;
  keys.energy = "REF_energy", keys.forces = "DFT_forces";
  const std::string no_forces = error_of([&] { read_extxyz(mace, {"O", "H"}, keys); });
  EXPECT_TRUE(contains(no_forces, "(frame 0): no forces: expected a column 'DFT_forces' (forces_key)")) << no_forces;
  EXPECT_TRUE(contains(no_forces, "the columns are species, pos, REF_forces")) << no_forces;
}

namespace {

/// Frames to predict on (`mlip model-devi`, LabelKeys::labels_optional): read without energy or
/// forces, which stay required for training data; a frame that has them keeps them.
TEST(Extxyz, LabelsOptionalReadsFramesWithoutThem) {
  TempDir tmp;
  const std::string path = tmp / "traj.xyz";
  const std::string bare = "3\nLattice=\"5 0 0 0 5 0 0 0 5\" Properties=species:S:1:pos:R:3 pbc=\"T T T\"\n"
                           "O 0.0 0.5 0.12\nH 0.76 0.5 -0.47\nH -0.76 0.5 -0.47\n";
  write_text(path, bare + bare);
  EXPECT_TRUE(contains(error_of([&] { read_extxyz(path, {"O", "H"}); }), "no energy and no forces")) << "training data";
  mlip::data::LabelKeys keys;
  keys.labels_optional = true;
  for (auto loading : {mlip::data::Loading::kInMemory, mlip::data::Loading::kStreamed}) {
    std::vector<std::string> names = {"O", "H"};
    const auto systems = load_systems({path}, names, "", loading, keys);
    ASSERT_EQ(systems.size(), 1u);
    EXPECT_FALSE(systems[0].has_energy);
    EXPECT_FALSE(systems[0].has_force);
    const auto frame = systems[0].frame(1);
    EXPECT_TRUE(frame.energy.empty());
    EXPECT_TRUE(frame.force.empty());
    ASSERT_EQ(frame.coord.size(), 9u);
    EXPECT_DOUBLE_EQ(frame.coord[3], 0.76) << "the first H after the O";
  }
  write_text(path, water_frame(0) + water_frame(1));
  std::vector<std::string> names = {"O", "H"};
  const auto labelled = load_systems({path}, names, "", mlip::data::Loading::kStreamed, keys);
  EXPECT_TRUE(labelled[0].has_energy && labelled[0].has_force);
  EXPECT_DOUBLE_EQ(labelled[0].frame(1).energy.at(0), -15.0);
  EXPECT_EQ(labelled[0].frame(1).force.size(), 9u);
}

}  // namespace

// --- Messages (docs/robustness.md "Messages about inputs") ----------------------------------

// A file with carriage returns only is one 14 kB "line": the message quotes a short excerpt with
// the \r visible, not the whole line. A NUL byte inside a key is shown as \0, and the message goes
// on after it. Through the real program.
TEST(Extxyz, MessagesQuoteShortExcerptsWithControlCharactersVisible) {
  TempDir tmp;
  std::string frame = "96\rLattice=\"9.8 0 0 0 9.8 0 0 0 9.8\" Properties=species:S:1:pos:R:3:forces:R:3 energy=-1\r";
  for (int a = 0; a < 96; ++a) frame += std::string(a < 32 ? "O" : "H") + " 1.5 2.5 3.5 0.1 0.2 0.3\r";
  write_text(tmp / "cr.xyz", frame + frame + frame);
  auto r = mlip::test::run_command(std::string(MLIP_EXE) + " neighbor-stat -s " + (tmp / "cr.xyz") + " -r 6 -t O H");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "expected the atom count of a frame (an integer), got '96\\rLattice=")) << r.err;
  EXPECT_TRUE(contains(r.err, "... (")) << r.err;
  EXPECT_LT(r.err.size(), 400u) << r.err;
  write_text(tmp / "nul.xyz", std::string("1\nLattice=\"9 0 0 0 9 0 0 0 9\" Properties=species:S:1:pos:R:3:forces:R:3 "
                                          "ener\0gy=-1 pbc=\"T T T\"\nO 1 1 1 0 0 0\n", 102));
  r = mlip::test::run_command(std::string(MLIP_EXE) + " neighbor-stat -s " + (tmp / "nul.xyz") + " -r 6 -t O H");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "its keys are Lattice, Properties, ener\\0gy, pbc (for labels")) << r.err;
}

// config_type values with spaces, quotes and backslashes are written quoted as ASE writes them
// (test --xyz, model-devi --candidates) and read back as they were.
TEST(Extxyz, ConfigTypesWithSpacesAndQuotesRoundTrip) {
  TempDir tmp;
  for (const std::string name : {"bulk water", "say \"hi\"", "back\\slash", "plain"}) {
    std::string escaped;
    for (char c : name) escaped += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
    write_text(tmp / "in.xyz", "1\nLattice=\"9 0 0 0 9 0 0 0 9\" Properties=species:S:1:pos:R:3:forces:R:3 energy=-1 "
                               "config_type=\"" + escaped + "\" pbc=\"T T T\"\nO 1 1 1 0.1 0.2 0.3\n");
    const auto systems = read_extxyz(tmp / "in.xyz", {"O"});
    ASSERT_EQ(systems.size(), 1u);
    ASSERT_EQ(systems[0].config_type, name);
    const mlip::data::Frame frame = systems[0].frame(0);
    const double forces[3] = {0.1, 0.2, 0.3};
    write_text(tmp / "out.xyz", mlip::data::extxyz_frame(systems[0], frame, {}, "mlip", -1.0, forces, nullptr));
    const auto back = read_extxyz(tmp / "out.xyz", {"O"});
    ASSERT_EQ(back.size(), 1u);
    EXPECT_EQ(back[0].config_type, name) << mlip::test::read_file(tmp / "out.xyz");
  }
}

namespace {

/// A water frame with a per-atom charge column `column` (R:1), atoms in the order H O H: charges
/// 0.41 + shift, -0.82, 0.42 + shift.
std::string charged_frame(double shift, const std::string& column = "REF_charges") {
  std::string s = "3\n" + std::string(kLattice) + "Properties=species:S:1:pos:R:3:forces:R:3:" + column +
                  ":R:1 energy=" + std::to_string(-14.0 - shift) + " pbc=\"T T T\"\n";
  s += "H 0.76 0.5 -0.47 0.2 -0.1 0.05 " + std::to_string(0.41 + shift) + "\n";
  s += "O 0.0 0.5 0.12 0.1 -0.1 0.05 -0.82\n";
  s += "H -0.76 0.5 -0.47 0.3 -0.1 0.05 " + std::to_string(0.42 + shift) + "\n";
  return s;
}

}  // namespace

// Per-atom charge labels (docs/long_range.md "Charge labels"): a REF_charges (or charges) column,
// or the one charges_key names; the charges follow their atoms when atoms are sorted by type, in
// memory and streamed; a system has them when every frame does.
TEST(Extxyz, ChargeLabelsFollowTheirAtoms) {
  TempDir tmp;
  const std::string path = tmp / "q.xyz";
  write_text(path, charged_frame(0) + charged_frame(0.01));
  for (const std::vector<std::string>& type_map : {std::vector<std::string>{"O", "H"}, {"H", "O"}}) {
    SCOPED_TRACE(type_map[0]);
    const bool o_first = type_map[0] == "O";
    const std::vector<double> first = o_first ? std::vector<double>{-0.82, 0.41, 0.42} : std::vector<double>{0.41, 0.42, -0.82};
    std::vector<System> systems = read_extxyz(path, type_map);
    ASSERT_EQ(systems.size(), 1u);
    EXPECT_TRUE(systems[0].has_charge);
    ASSERT_EQ(systems[0].charge.size(), 6u);
    for (size_t a = 0; a < 3; ++a) EXPECT_DOUBLE_EQ(systems[0].charge[a], first[a]) << a;
    std::vector<std::string> names = type_map;
    const auto streamed = load_systems({path}, names, "", mlip::data::Loading::kStreamed);
    ASSERT_EQ(streamed.size(), 1u);
    EXPECT_TRUE(streamed[0].has_charge);
    for (int64_t f = 0; f < 2; ++f) {
      const auto q = streamed[0].frame(f).charge;
      ASSERT_EQ(q.size(), 3u);
      for (size_t a = 0; a < 3; ++a) EXPECT_DOUBLE_EQ(q[a], systems[0].charge[size_t(f) * 3 + a]) << f << " " << a;
    }
  }
  // `charges` is read too; another name only under charges_key.
  write_text(path, charged_frame(0, "charges"));
  EXPECT_TRUE(read_extxyz(path, {"O", "H"})[0].has_charge);
  write_text(path, charged_frame(0, "hirshfeld"));
  EXPECT_FALSE(read_extxyz(path, {"O", "H"})[0].has_charge);
  mlip::data::LabelKeys keys;
  keys.charges = "hirshfeld";
  EXPECT_DOUBLE_EQ(read_extxyz(path, {"O", "H"}, keys)[0].charge[0], -0.82);
  // A frame without them: the system has none; but a named key must be in every frame.
  write_text(path, charged_frame(0, "hirshfeld") + water_frame(1));
  const auto mixed = read_extxyz(path, {"O", "H"});
  EXPECT_FALSE(mixed[0].has_charge);
  EXPECT_TRUE(mixed[0].charge.empty());
  std::string msg = error_of([&] { read_extxyz(path, {"O", "H"}, keys); });
  EXPECT_TRUE(contains(msg, "no charges: expected a column 'hirshfeld' (charges_key) of type R and count 1 in "
                            "Properties; the columns are species, pos, forces"))
      << msg;
  // A column of the wrong shape, a value that is no number.
  write_text(path, "1\nProperties=species:S:1:pos:R:3:REF_charges:R:3 energy=-1\nO 0 0 0 1 2 3\n");
  msg = error_of([&] { read_extxyz(path, {"O", "H"}); });
  EXPECT_TRUE(contains(msg, "expected the charges column 'REF_charges' of type R and count 1")) << msg;
  write_text(path, "1\nProperties=species:S:1:pos:R:3:REF_charges:R:1 energy=-1\nO 0 0 0 minus\n");
  msg = error_of([&] { read_extxyz(path, {"O", "H"}); });
  EXPECT_TRUE(contains(msg, "atom 0: column 'REF_charges': expected a number, got 'minus'")) << msg;
}
