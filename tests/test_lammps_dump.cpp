// LAMMPS text dumps (data/lammps_dump.h, docs/data.md "LAMMPS dump files"): frames of an MD run,
// read without labels for `mlip model-devi`.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>
#include <vector>

#include "data/extxyz.h"
#include "data/lammps_dump.h"
#include "data/load.h"
#include "error.h"
#include "test_util.h"

using mlip::data::is_lammps_dump_path;
using mlip::data::LabelKeys;
using mlip::data::load_systems;
using mlip::data::Loading;
using mlip::data::open_lammps_dump;
using mlip::data::read_extxyz;
using mlip::data::read_lammps_dump;
using mlip::data::System;
using mlip::test::contains;
using mlip::test::error_of;
using mlip::test::TempDir;
using mlip::test::write_text;

namespace {

/// Frames to predict on: the only way a dump is read.
LabelKeys predict_keys() {
  LabelKeys keys;
  keys.labels_optional = true;
  return keys;
}

/// One snapshot: the header LAMMPS writes, then the atom lines as given; `count` under NUMBER
/// OF ATOMS (-1: the number of atom lines).
std::string snapshot(long step, const std::string& bounds_item, const std::string& bounds, const std::string& columns,
                     const std::vector<std::string>& atoms, long count = -1) {
  std::string s = "ITEM: TIMESTEP\n" + std::to_string(step) + "\nITEM: NUMBER OF ATOMS\n" +
                  std::to_string(count < 0 ? long(atoms.size()) : count) + "\nITEM: BOX BOUNDS " + bounds_item + "\n" +
                  bounds + "ITEM: ATOMS " + columns + "\n";
  for (const std::string& a : atoms) s += a + "\n";
  return s;
}

/// An atom as (element, x, y, z) in id order: the reference the dumps are written from.
struct Atom {
  std::string element;
  double x, y, z;
};

/// Four atoms, ids 1..4: H O H O (two types, so sorting by type moves atoms).
const std::vector<Atom> kAtoms = {
    {"H", 0.76, 0.5, -0.47}, {"O", 0.0, 0.5, 0.12}, {"H", -0.76, 0.5, -0.47}, {"O", 3.0, 4.0, 5.0}};

std::string number(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.10g", v);
  return b;
}

/// The atom lines "id type element x y z fx fy fz" of kAtoms shifted by `shift` in x, in the
/// order of `ids` (1-based).
std::vector<std::string> atom_lines(double shift, const std::vector<int>& ids) {
  std::vector<std::string> out;
  for (int id : ids) {
    const Atom& a = kAtoms[size_t(id - 1)];
    out.push_back(std::to_string(id) + " " + (a.element == "O" ? "1" : "2") + " " + a.element + " " +
                  number(a.x + shift) + " " + number(a.y) + " " + number(a.z) + " 0.1 -0.2 0.3");
  }
  return out;
}

const char* kColumns = "id type element x y z fx fy fz";

/// The same frames as extended XYZ (no labels), atoms in id order: an independent reader.
std::string xyz_frame(double shift, const std::array<double, 9>& cell, const std::string& pbc) {
  std::string s = "4\nLattice=\"";
  for (int k = 0; k < 9; ++k) s += (k ? " " : "") + number(cell[size_t(k)]);
  s += "\" Properties=species:S:1:pos:R:3 pbc=\"" + pbc + "\"\n";
  for (const Atom& a : kAtoms)
    s += a.element + " " + number(a.x + shift) + " " + number(a.y) + " " + number(a.z) + "\n";
  return s;
}

/// The dump's systems against the extended XYZ file's: the same composition names, types, cells,
/// periodicity and positions, bit for bit.
void expect_same_systems(const std::vector<System>& dump, const std::vector<System>& xyz) {
  ASSERT_EQ(dump.size(), xyz.size());
  for (size_t k = 0; k < dump.size(); ++k) {
    const System& a = dump[k];
    const System& b = xyz[k];
    EXPECT_EQ(a.name.substr(a.name.find('[')), b.name.substr(b.name.find('[')));
    EXPECT_EQ(a.type_map, b.type_map);
    EXPECT_EQ(a.types, b.types);
    EXPECT_EQ(a.pbc, b.pbc);
    EXPECT_EQ(a.nframes, b.nframes);
    EXPECT_EQ(a.has_box(), b.has_box());
    EXPECT_EQ(a.coord, b.coord);
    EXPECT_EQ(a.box, b.box);
    EXPECT_FALSE(a.has_energy);
    EXPECT_FALSE(a.has_force);
    EXPECT_TRUE(a.energy.empty() && a.force.empty() && a.virial.empty());
  }
}

}  // namespace

TEST(LammpsDump, RecognisedByFileName) {
  EXPECT_TRUE(is_lammps_dump_path("/d/run/traj.dump"));
  EXPECT_TRUE(is_lammps_dump_path("run.lammpstrj"));
  EXPECT_TRUE(is_lammps_dump_path("md/dump.water"));
  EXPECT_TRUE(is_lammps_dump_path("TRAJ.DUMP"));
  EXPECT_FALSE(is_lammps_dump_path("traj.xyz"));
  EXPECT_FALSE(is_lammps_dump_path("dump"));
  EXPECT_FALSE(is_lammps_dump_path("mydump.txt"));
  EXPECT_FALSE(is_lammps_dump_path("dump.d/traj.txt"));
}

// An orthogonal box with its origin away from 0, two snapshots, the second with its ids out of
// order (no dump_modify sort id): atoms in id order, then sorted by type.
TEST(LammpsDump, OrthogonalBox) {
  TempDir tmp;
  const std::string path = tmp / "traj.dump";
  const std::string bounds = "-1.0 9.0\n0.0 11.0\n2.0 14.0\n";
  write_text(path, snapshot(0, "pp pp pp", bounds, kColumns, atom_lines(0, {1, 2, 3, 4})) +
                       snapshot(100, "pp pp pp", bounds, kColumns, atom_lines(0.5, {4, 2, 3, 1})));
  const auto systems = read_lammps_dump(path, {"O", "H"}, predict_keys());
  ASSERT_EQ(systems.size(), 1u);
  const System& s = systems[0];
  EXPECT_EQ(s.name, path + "[O2H2]");
  EXPECT_EQ(s.nframes, 2);
  EXPECT_EQ(s.types, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(s.pbc, (std::array<bool, 3>{true, true, true}));
  EXPECT_EQ(s.box, (std::vector<double>{10, 0, 0, 0, 11, 0, 0, 0, 12, 10, 0, 0, 0, 11, 0, 0, 0, 12}));
  // Type order O O H H; within a type, id order: ids 2, 4, 1, 3.
  const std::vector<double> frame0 = {0.0, 0.5, 0.12, 3.0, 4.0, 5.0, 0.76, 0.5, -0.47, -0.76, 0.5, -0.47};
  const std::vector<double> frame1 = {0.5, 0.5, 0.12, 3.5, 4.0, 5.0, 1.26, 0.5, -0.47, -0.26, 0.5, -0.47};
  ASSERT_EQ(s.coord.size(), 24u);
  for (size_t k = 0; k < 12; ++k) {
    EXPECT_DOUBLE_EQ(s.coord[k], frame0[k]) << k;
    EXPECT_DOUBLE_EQ(s.coord[12 + k], frame1[k]) << "frame 1 (ids 4 2 3 1 in the file): " << k;
  }
  EXPECT_TRUE(s.energy.empty() && s.force.empty());
  EXPECT_FALSE(s.has_energy || s.has_force || s.has_virial);

  // The same frames as extended XYZ, read by read_extxyz.
  const std::string xyz = tmp / "traj.xyz";
  const std::array<double, 9> cell = {10, 0, 0, 0, 11, 0, 0, 0, 12};
  write_text(xyz, xyz_frame(0, cell, "T T T") + xyz_frame(0.5, cell, "T T T"));
  expect_same_systems(systems, read_extxyz(xyz, {"O", "H"}, predict_keys()));
}

// A restricted triclinic box (bounding box and tilts), periodic in x and y only, its origin at
// (1, -2, 0.5): xlo = 1, xhi = 11, ylo = -2, yhi = 6, zlo = 0.5, zhi = 6.5, xy = 2, xz = -1,
// yz = 1.5, so the bounding box is x [0, 13], y [-2, 7.5], z [0.5, 6.5].
TEST(LammpsDump, TriclinicBox) {
  TempDir tmp;
  const std::string path = tmp / "tri.lammpstrj";
  const std::string bounds = "0.0 13.0 2.0\n-2.0 7.5 -1.0\n0.5 6.5 1.5\n";
  write_text(path, snapshot(0, "xy xz yz pp pp fs", bounds, kColumns, atom_lines(0, {3, 1, 4, 2})) +
                       snapshot(10, "xy xz yz pp pp fs", bounds, kColumns, atom_lines(1.0, {1, 2, 3, 4})));
  const auto systems = read_lammps_dump(path, {"O", "H"}, predict_keys());
  ASSERT_EQ(systems.size(), 1u);
  const System& s = systems[0];
  EXPECT_EQ(s.name, path + "[O2H2,pbc=TTF]");
  EXPECT_EQ(s.pbc, (std::array<bool, 3>{true, true, false}));
  const std::array<double, 9> cell = {10, 0, 0, 2, 8, 0, -1, 1.5, 6};
  ASSERT_EQ(s.box.size(), 18u);
  for (size_t k = 0; k < 9; ++k) {
    EXPECT_DOUBLE_EQ(s.box[k], cell[k]) << k;
    EXPECT_DOUBLE_EQ(s.box[9 + k], cell[k]) << k;
  }
  EXPECT_EQ(s.types, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_DOUBLE_EQ(s.coord[3], 3.0) << "positions as written: the origin is not subtracted";
  EXPECT_DOUBLE_EQ(s.coord[12 + 6], 1.76);

  const std::string xyz = tmp / "tri.xyz";
  write_text(xyz, xyz_frame(0, cell, "T T F") + xyz_frame(1.0, cell, "T T F"));
  expect_same_systems(systems, read_extxyz(xyz, {"O", "H"}, predict_keys()));

  // Fully non-periodic (ff ss fm): no cell, as for extended XYZ.
  write_text(path, snapshot(0, "xy xz yz ff ss fm", bounds, kColumns, atom_lines(0, {1, 2, 3, 4})));
  const auto cluster = read_lammps_dump(path, {"O", "H"}, predict_keys());
  EXPECT_EQ(cluster[0].name, path + "[O2H2,pbc=FFF]");
  EXPECT_FALSE(cluster[0].has_box());
  EXPECT_TRUE(cluster[0].box.empty());
}

// Scaled (xs ys zs) and scaled unwrapped (xsu ...) coordinates: Cartesian = origin + fractions ·
// cell, the same positions as the Cartesian dump of the same atoms.
TEST(LammpsDump, ScaledCoordinates) {
  TempDir tmp;
  const std::string bounds = "0.0 13.0 2.0\n-2.0 7.5 -1.0\n0.5 6.5 1.5\n";  // as TriclinicBox
  const std::array<double, 9> h = {10, 0, 0, 2, 8, 0, -1, 1.5, 6};
  const std::array<double, 3> origin = {1, -2, 0.5};
  const std::vector<std::array<double, 3>> fractions = {{0.1, 0.2, 0.3}, {0.9, 0.05, 0.5}, {-0.25, 1.5, 0.75}};
  std::vector<std::string> scaled, unwrapped, cartesian;
  std::vector<double> expected;
  for (size_t a = 0; a < fractions.size(); ++a) {
    const auto& f = fractions[a];
    std::string cart = std::to_string(a + 1) + " Ar";
    for (size_t d = 0; d < 3; ++d) {
      const double x = origin[d] + f[0] * h[d] + f[1] * h[3 + d] + f[2] * h[6 + d];
      expected.push_back(x);
      cart += " " + number(x);
    }
    scaled.push_back(std::to_string(a + 1) + " Ar " + number(f[0]) + " " + number(f[1]) + " " + number(f[2]));
    unwrapped.push_back(scaled.back());
    cartesian.push_back(cart);
  }
  // By hand: atom 0 at (1 + 1 + 0.4 - 0.3, -2 + 1.6 + 0.45, 0.5 + 1.8).
  EXPECT_NEAR(expected[0], 2.1, 1e-12);
  EXPECT_NEAR(expected[1], 0.05, 1e-12);
  EXPECT_NEAR(expected[2], 2.3, 1e-12);
  const std::string p1 = tmp / "scaled.dump", p2 = tmp / "unwrapped.dump", p3 = tmp / "cart.dump";
  write_text(p1, snapshot(0, "xy xz yz pp pp pp", bounds, "id element xs ys zs", scaled));
  write_text(p2, snapshot(0, "xy xz yz pp pp pp", bounds, "id element xsu ysu zsu", unwrapped));
  write_text(p3, snapshot(0, "xy xz yz pp pp pp", bounds, "id element x y z", cartesian));
  const auto s1 = read_lammps_dump(p1, {"Ar"}, predict_keys());
  const auto s2 = read_lammps_dump(p2, {"Ar"}, predict_keys());
  const auto s3 = read_lammps_dump(p3, {"Ar"}, predict_keys());
  ASSERT_EQ(s1[0].coord.size(), 9u);
  for (size_t k = 0; k < 9; ++k) {
    EXPECT_NEAR(s1[0].coord[k], expected[k], 1e-12) << k;
    EXPECT_EQ(s2[0].coord[k], s1[0].coord[k]) << k;
    EXPECT_NEAR(s3[0].coord[k], s1[0].coord[k], 1e-8) << k;
  }
  EXPECT_EQ(s1[0].box, s3[0].box);
}

// Unwrapped coordinates, columns in another order, x y z preferred over xu yu zu, no id column
// (the file's order), and the UNITS and TIME items of dump_modify units yes / time yes.
TEST(LammpsDump, ColumnsInAnyOrder) {
  TempDir tmp;
  const std::string path = tmp / "dump.water";
  const std::string bounds = "0 10\n0 10\n0 10\n";
  write_text(path, "ITEM: UNITS\nmetal\nITEM: TIME\n0.5\n" +
                       snapshot(1000, "pp pp pp", bounds, "zu c_pe yu element xu",
                                {"3.0 -1.5 2.0 O 1.0", "6.0 -1.5 5.0 H 4.0", "9.0 -1.5 8.0 H 7.0"}) +
                       "ITEM: TIME\n1.0\n" +
                       snapshot(2000, "pp pp pp", bounds, "x y z xu yu zu element",
                                {"1 2 3 11 12 13 H", "4 5 6 14 15 16 O", "7 8 9 17 18 19 H"}));
  const auto systems = read_lammps_dump(path, {"O", "H"}, predict_keys());
  ASSERT_EQ(systems.size(), 1u);
  ASSERT_EQ(systems[0].nframes, 2);
  EXPECT_EQ(systems[0].coord, (std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9,  //
                                                   4, 5, 6, 1, 2, 3, 7, 8, 9}));
}

// A dump as LAMMPS (29 Sep 2021, `mlip lammps` under mpirun -np 2) wrote it: atoms of both ranks
// (ids not in order), a triclinic box shrink-wrapped in z (pp pp ss), x y z beside xs ys zs, by
//   region box prism 0.5 8.5 -1 8 -1 7 2.0 -1.5 1.0 (boundary p p s), 5 O + 3 H, minimize, NVE,
//   dump 1 all custom 10 real.dump id type element x y z xs ys zs
//   dump_modify 1 element O H format float %.15g
// Read from x y z, and from xs ys zs (the x y z columns renamed): the same positions, so the cell
// and origin recovered from the bounds are LAMMPS' own.
const char* kLammpsWrote = R"(ITEM: TIMESTEP
0
ITEM: NUMBER OF ATOMS
8
ITEM: BOX BOUNDS xy xz yz pp pp ss
-1.0000000000000000e+00 1.0500000000000000e+01 2.0000000000000000e+00
-1.0000000000000000e+00 9.0000000000000000e+00 -1.5000000000000000e+00
-9.1040087670683889e-01 6.9760375493288214e+00 1.0000000000000000e+00
ITEM: ATOMS id type element x y z xs ys zs
1 1 O 1.790447105556 0.777828764998274 6.97523754932882 0.327177695842007 0.0864366894398297 0.999898560039807
2 1 O 6.0319395936557 2.18137896773729 4.82671844188333 0.759728170713153 0.272656947068156 0.72746644412389
6 2 H 5.03748853875792 2.66959622853623 4.64607499316311 0.616929135845531 0.329448373857936 0.704560863814805
7 2 H 5.47515909453547 3.01931438126005 -0.032083863729801 0.53422287039152 0.434215980857638 0.111370553541309
3 1 O 9.61588657489786 7.874490702932 1.85196578153668 0.96837709816407 0.947135860902148 0.350267954812665
4 1 O 2.53308751365779 4.30594960567819 4.6763533102216 0.259251260856769 0.51083882808522 0.708400152911202
5 1 O 5.93927109739791 3.9617602485483 1.96831382332586 0.620663097648308 0.510748818647347 0.365020880722169
8 2 H 2.67826480659575 6.04052561290586 -0.909600876706839 0.0767347826796257 0.782269352549519 0.0001014399601928
ITEM: TIMESTEP
10
ITEM: NUMBER OF ATOMS
8
ITEM: BOX BOUNDS xy xz yz pp pp ss
-1.0000000000000000e+00 1.0500000000000000e+01 2.0000000000000000e+00
-1.0000000000000000e+00 9.0000000000000000e+00 -1.5000000000000000e+00
-9.1040087670683889e-01 6.9760375493288214e+00 1.0000000000000000e+00
ITEM: ATOMS id type element x y z xs ys zs
1 1 O 1.02828230287733 0.376995905524689 7.46005473477617 0.256275498858605 0.0350691722771309 1.06137335503051
2 1 O 5.98815258900383 2.41503436808326 4.46483293561731 0.737885902137257 0.303717220905204 0.681579379936421
6 2 H 5.11361329517014 3.11615496522718 3.95436113684679 0.59515846160412 0.388811487108255 0.616851581252888
7 2 H 5.31706211615155 2.5168100768136 -0.0793833008267321 0.527128058256071 0.379048565504734 0.105372987270991
3 1 O 8.92780713746667 8.33572593011591 2.21659249568156 0.879508371379461 0.99324703623257 0.396502604022773
4 1 O 3.24311043601662 4.3019666923614 4.78915694859768 0.351193987408518 0.508807004857456 0.722703648644292
5 1 O 6.48572639746406 3.40797407798006 1.34677980333212 0.687386813734465 0.457973742229575 0.286210397913878
8 2 H 2.9977900509042 6.36018249649009 -0.149415595002138 0.128547018762487 0.807076622292867 0.0964928958542863
ITEM: TIMESTEP
20
ITEM: NUMBER OF ATOMS
8
ITEM: BOX BOUNDS xy xz yz pp pp ss
-1.0000000000000000e+00 1.0500000000000000e+01 2.0000000000000000e+00
-1.0000000000000000e+00 9.0000000000000000e+00 -1.5000000000000000e+00
-8.4857329101815065e-02 7.5093364533209028e+00 1.0000000000000000e+00
ITEM: ATOMS id type element x y z xs ys zs
1 1 O 0.266117500198667 -0.0238369539488969 7.94487192022351 0.171273245326648 -0.00902089634437835 1.05735111315051
2 1 O 5.93039345422723 2.66004848971101 4.09458885700465 0.6956087726538 0.345522323068603 0.550347582093583
6 2 H 5.20334949521412 3.55158084308747 3.27123068583816 0.556623195942505 0.456628076922921 0.441928150781176
7 2 H 5.1597304253178 2.01488520267964 -0.125758915233725 0.497560026890147 0.335585678336521 -0.00538590234905239
3 1 O 6.23972770003549 -0.203038842700174 2.58121920982643 0.77090523806472 0.0495437117075782 0.351067751931622
5 1 O 7.03141640998005 2.85360847709933 0.724321960648455 0.732320727170992 0.41633956827491 0.106552362625137
8 2 H 3.31731529521265 6.67983938007431 0.610769686702562 0.158554952512159 0.843137725498506 0.0915998505877548
4 1 O 3.95349404486841 4.29775791659349 4.90173575401273 0.425885160182567 0.515680621825685 0.656632320162327
)";

TEST(LammpsDump, AsLammpsWroteIt) {
  TempDir tmp;
  const std::string path = tmp / "real.dump", scaled = tmp / "scaled.dump";
  std::string text = kLammpsWrote;
  write_text(path, text);
  for (size_t at = text.find("id type element x y z"); at != std::string::npos;
       at = text.find("id type element x y z", at + 1))
    text.replace(at, 21, "id type element a b c");
  write_text(scaled, text);
  const auto cartesian = read_lammps_dump(path, {"O", "H"}, predict_keys());
  const auto fractional = read_lammps_dump(scaled, {"O", "H"}, predict_keys());
  ASSERT_EQ(cartesian.size(), 1u);
  const System& s = cartesian[0];
  EXPECT_EQ(s.name, path + "[O5H3,pbc=TTF]");
  EXPECT_EQ(s.nframes, 3);
  EXPECT_EQ(s.types, (std::vector<int>{0, 0, 0, 0, 0, 1, 1, 1}));
  // Frame 0's cell: the bounds' tilts removed (xlo = -1 + 1.5, ...).
  const std::vector<double> cell0 = {8, 0, 0, 2, 9, 0, -1.5, 1, 6.9760375493288214 + 0.91040087670683889};
  for (size_t k = 0; k < 9; ++k) EXPECT_NEAR(s.box[k], cell0[k], 1e-14) << k;
  EXPECT_NEAR(s.box[18 + 8], 7.5093364533209028 + 0.084857329101815065, 1e-14) << "frame 2's z extent";
  // Id order within each type: frame 2's atoms 0, 4 and 7 are ids 1, 5 and 8.
  EXPECT_EQ(s.coord[48 + 0], 0.266117500198667);
  EXPECT_EQ(s.coord[48 + 12], 7.03141640998005);
  EXPECT_EQ(s.coord[48 + 21], 3.31731529521265);
  ASSERT_EQ(fractional[0].coord.size(), s.coord.size());
  for (size_t k = 0; k < s.coord.size(); ++k) EXPECT_NEAR(fractional[0].coord[k], s.coord[k], 1e-12) << k;
  EXPECT_EQ(fractional[0].box, s.box);
}

// Unsorted ids with one element only: the id order alone decides.
TEST(LammpsDump, AtomsInIdOrder) {
  TempDir tmp;
  const std::string path = tmp / "ids.dump";
  write_text(path, snapshot(0, "pp pp pp", "0 10\n0 10\n0 10\n", "element x y z id",
                            {"Ar 3 0 0 30", "Ar 1 0 0 10", "Ar 4 0 0 40", "Ar 2 0 0 -20"}));
  const auto systems = read_lammps_dump(path, {"Ar"}, predict_keys());
  ASSERT_EQ(systems[0].coord.size(), 12u);
  EXPECT_EQ(systems[0].coord[0], 2.0) << "id -20";
  EXPECT_EQ(systems[0].coord[3], 1.0) << "id 10";
  EXPECT_EQ(systems[0].coord[6], 3.0) << "id 30";
  EXPECT_EQ(systems[0].coord[9], 4.0) << "id 40";
}

// Frames grouped by composition and periodicity, in order of first appearance.
TEST(LammpsDump, GroupsFramesByCompositionAndPeriodicity) {
  TempDir tmp;
  const std::string path = tmp / "mixed.dump";
  const std::string b = "0 10\n0 10\n0 10\n";
  write_text(path, snapshot(0, "pp pp pp", b, "id element x y z", {"1 O 0 0 0", "2 H 1 0 0"}) +
                       snapshot(1, "pp pp pp", b, "id element x y z", {"1 O 0 0 0", "2 O 1 0 0"}) +
                       snapshot(2, "pp pp ff", b, "id element x y z", {"1 O 0 0 0", "2 H 1 0 0"}) +
                       snapshot(3, "pp pp pp", b, "id element x y z", {"1 H 0 0 0", "2 O 2 0 0"}));
  const auto systems = read_lammps_dump(path, {"O", "H"}, predict_keys());
  ASSERT_EQ(systems.size(), 3u);
  EXPECT_EQ(systems[0].name, path + "[O1H1]");
  EXPECT_EQ(systems[0].nframes, 2);
  EXPECT_EQ(systems[0].coord, (std::vector<double>{0, 0, 0, 1, 0, 0, 2, 0, 0, 0, 0, 0}));
  EXPECT_EQ(systems[1].name, path + "[O2]");
  EXPECT_EQ(systems[2].name, path + "[O1H1,pbc=TTF]");
}

// load_systems picks dumps by name, fills the type map from them (sorted names) and streams them
// as it reads them into memory: the same bits; FrameReader::where names the timestep.
TEST(LammpsDump, LoadSystemsStreamedEqualsInMemory) {
  TempDir tmp;
  const std::string bounds = "0.0 13.0 2.0\n-2.0 7.5 -1.0\n0.5 6.5 1.5\n";
  const std::string text = snapshot(0, "xy xz yz pp pp pp", bounds, kColumns, atom_lines(0, {3, 1, 4, 2})) +
                           snapshot(500, "xy xz yz pp pp pp", bounds, kColumns, atom_lines(0.3, {1, 2, 3, 4})) +
                           snapshot(1000, "xy xz yz pp pp pp", bounds, kColumns, atom_lines(0.7, {4, 3, 2, 1}));
  for (const std::string name : {"a.dump", "b.lammpstrj", "dump.c"}) {
    const std::string path = tmp / name;
    write_text(path, text);
    std::vector<std::string> in_memory_map, streamed_map;
    const auto in_memory = load_systems({path}, in_memory_map, "", Loading::kInMemory, predict_keys());
    const auto streamed = load_systems({path}, streamed_map, "", Loading::kStreamed, predict_keys());
    EXPECT_EQ(in_memory_map, (std::vector<std::string>{"H", "O"}));
    EXPECT_EQ(streamed_map, in_memory_map);
    ASSERT_EQ(in_memory.size(), 1u);
    ASSERT_EQ(streamed.size(), 1u);
    EXPECT_TRUE(in_memory[0].in_memory());
    EXPECT_FALSE(streamed[0].in_memory());
    EXPECT_EQ(in_memory[0].types, (std::vector<int>{0, 0, 1, 1}));
    EXPECT_EQ(streamed[0].types, in_memory[0].types);
    ASSERT_EQ(streamed[0].nframes, 3);
    for (int64_t f = 0; f < 3; ++f) {
      const auto a = in_memory[0].frame(f), b = streamed[0].frame(f);
      EXPECT_EQ(a.coord, b.coord) << f;
      EXPECT_EQ(a.box, b.box) << f;
      EXPECT_TRUE(b.energy.empty() && b.force.empty() && b.virial.empty());
    }
    // H first now (type map H, O): ids 1, 3, then O ids 2, 4.
    EXPECT_DOUBLE_EQ(in_memory[0].frame(2).coord[0], 0.76 + 0.7);
    EXPECT_DOUBLE_EQ(in_memory[0].frame(2).coord[9], 3.0 + 0.7);
    EXPECT_EQ(streamed[0].reader->where(2), "line 27 of " + path + ", timestep 1000");
  }
  // Training data: refused, naming the file.
  std::vector<std::string> names;
  const std::string msg = error_of([&] { load_systems({tmp / "a.dump"}, names); });
  EXPECT_TRUE(contains(msg, tmp / "a.dump" + ": a LAMMPS dump carries no energy labels")) << msg;
  // Another name keeps today's behaviour.
  write_text(tmp / "traj.txt", text);
  const std::string other =
      error_of([&] { load_systems({tmp / "traj.txt"}, names, "", Loading::kStreamed, predict_keys()); });
  EXPECT_TRUE(contains(other, "not a DeePMD system folder")) << other;
}

// A streamed dump rewritten after it was opened (an MD run still writing it): the error names
// the frame, its line and timestep.
TEST(LammpsDump, StreamedFileChangedIsAnError) {
  TempDir tmp;
  const std::string path = tmp / "traj.dump";
  const std::string b = "0 10\n0 10\n0 10\n";
  write_text(path, snapshot(0, "pp pp pp", b, "id element x y z", {"1 O 0 0 0", "2 H 1 0 0"}) +
                       snapshot(7, "pp pp pp", b, "id element x y z", {"1 O 0 0 0", "2 H 1 0 0"}));
  const auto systems = open_lammps_dump(path, {"O", "H"}, predict_keys());
  write_text(path + ".new", snapshot(0, "pp pp pp", b, "id element x y z", {"1 O 0 0 0", "2 H 1 0 0"}));
  std::rename((path + ".new").c_str(), path.c_str());
  const std::string msg = error_of([&] { systems[0].frame(1); });
  EXPECT_TRUE(contains(msg, systems[0].name + ": frame 1 (line 12 of " + path + ", timestep 7): " + path +
                                ": changed since it was opened at start"))
      << msg;
}

TEST(LammpsDump, Errors) {
  TempDir tmp;
  const std::string path = tmp / "bad.dump";
  const std::string b = "0 10\n0 10\n0 10\n";
  const std::vector<std::string> two = {"1 O 0 0 0", "2 H 1 0 0"};
  auto expect_error = [&](const std::string& text, const std::vector<std::string>& phrases) {
    write_text(path, text);
    const std::string msg = error_of([&] { open_lammps_dump(path, {"O", "H"}, predict_keys()); });
    for (const std::string& p : phrases) EXPECT_TRUE(contains(msg, p)) << msg << "\n  missing: " << p;
  };
  const std::string good = snapshot(0, "pp pp pp", b, "id element x y z", two);
  // A missing ITEM line.
  expect_error("ITEM: TIMESTEP\n0\nITEM: BOX BOUNDS pp pp pp\n" + b,
               {path + ":3: expected 'ITEM: NUMBER OF ATOMS', got 'ITEM: BOX BOUNDS pp pp pp'"});
  expect_error(good + "0\nITEM: NUMBER OF ATOMS\n",
               {path + ":12: expected 'ITEM: TIMESTEP' (the start of a snapshot), got '0'",
                "NUMBER OF ATOMS of the snapshot before, 2 at line 4"});
  expect_error("ITEM: TIMESTEP\n0\nITEM: NUMBER OF ATOMS\n2\nITEM: BOX BOUNDS pp pp pp\n" + b + "1 O 0 0 0\n",
               {path + ":9: expected 'ITEM: ATOMS' after the box bounds, got '1 O 0 0 0'"});
  // Wrong atom counts: more declared than written (then the next snapshot, or the end), fewer.
  expect_error(snapshot(0, "pp pp pp", b, "id element x y z", two, 3) + good,
               {path + ":12: expected atom line 3 of 3", "got 'ITEM: TIMESTEP'", "NUMBER OF ATOMS at line 4 says 3"});
  expect_error(snapshot(0, "pp pp pp", b, "id element x y z", two, 3),
               {path + ":12: expected atom line 3 of 3", "got the end of the file"});
  expect_error(snapshot(0, "pp pp pp", b, "id element x y z", two, 1),
               {path + ":11: expected 'ITEM: TIMESTEP' (the start of a snapshot), got '2 H 1 0 0'"});
  expect_error(snapshot(0, "pp pp pp", b, "id element x y z", {"1 O 0 0 0", "2 H 1 0"}),
               {path + ":11: expected atom line 2 of 2 with 5 values", "got 4 values: '2 H 1 0'"});
  // Missing columns.
  expect_error(snapshot(0, "pp pp pp", b, "id element x y", two),
               {path + ":9: the columns have 'x' but no 'z' column", "expected x y z"});
  expect_error(snapshot(0, "pp pp pp", b, "id element vx vy vz", two),
               {path + ":9: expected position columns x y z (or xu yu zu, xs ys zs, xsu ysu zsu)"});
  expect_error(snapshot(0, "pp pp pp", b, "id type x y z", {"1 1 0 0 0", "2 2 1 0 0"}),
               {path + ":9: the atoms have a 'type' column but no 'element' column",
                "add `element` to the dump command", "dump_modify <dump id> element <names>"});
  // Non-numbers.
  expect_error(snapshot(0, "pp pp pp", b, "id element x y z", {"1 O 0 0 0", "2 H 1 abc 0"}),
               {path + ":11: column 'y': expected a number, got 'abc'"});
  expect_error(snapshot(0, "pp pp pp", b, "id element x y z", {"1.5 O 0 0 0", "2 H 1 0 0"}),
               {path + ":10: column 'id': expected an integer atom id, got '1.5'"});
  expect_error("ITEM: TIMESTEP\nten\n",
               {path + ":2: expected the timestep (an integer) under 'ITEM: TIMESTEP', got 'ten'"});
  expect_error(snapshot(0, "pp pp pp", "0 10\n0 x\n0 10\n", "id element x y z", two),
               {path + ":7: expected line 2 of 3 of the box bounds under line 5: 2 finite numbers 'lo hi', got '0 x'"});
  expect_error(snapshot(0, "xy xz yz pp pp pp", b, "id element x y z", two),
               {path + ":6: expected line 1 of 3 of the box bounds", "3 finite numbers 'lo_bound hi_bound tilt'"});
  expect_error(snapshot(0, "pp pp", b, "id element x y z", two),
               {path + ":5: expected 'ITEM: BOX BOUNDS' followed by three"});
  // An element not in the type map.
  expect_error(snapshot(0, "pp pp pp", b, "id element x y z", {"1 O 0 0 0", "2 C 1 0 0"}),
               {path + ":11: column 'element': element 'C' is not in the type_map [O, H]"});
  // Non-finite coordinates (a run that blew up).
  expect_error(good + snapshot(1, "pp pp pp", b, "id element x y z", {"1 O nan 0 0", "2 H 1 0 0"}),
               {path + ":21: column 'x' is 'nan', expected a finite number"});
  expect_error(snapshot(0, "pp pp pp", b, "id element x y z", {"1 O 0 0 0", "2 H 1 0 -inf"}),
               {path + ":11: column 'z' is '-inf', expected a finite number"});
  // Repeated ids, zero atoms, units in other lengths, an empty file, blank lines inside.
  expect_error(snapshot(0, "pp pp pp", b, "id element x y z", {"1 O 0 0 0", "1 H 1 0 0"}),
               {path + ":11: atom id 1 again (first at line 10)"});
  expect_error(snapshot(0, "pp pp pp", b, "id element x y z", {}),
               {path + ":4: expected a positive number of atoms under 'ITEM: NUMBER OF ATOMS', got 0"});
  expect_error("ITEM: UNITS\nlj\n" + good, {path + ":2: units 'lj': expected metal or real"});
  expect_error("", {path + ": no snapshots"});
  expect_error(good + "\n" + good,
               {path + ":12: expected 'ITEM: TIMESTEP' (the start of a snapshot), got an empty line"});
  // Compressed.
  write_text(path, std::string("\x1f\x8b\x08\x00", 4) + "rest");
  std::string msg = error_of([&] { open_lammps_dump(path, {}, predict_keys()); });
  EXPECT_TRUE(contains(msg, path + ": is gzip-compressed")) << msg;
  // Training data.
  write_text(path, good);
  msg = error_of([&] { open_lammps_dump(path, {}); });
  EXPECT_TRUE(contains(msg, path + ": a LAMMPS dump carries no energy labels")) << msg;
  // Trailing blank lines and Windows line endings are fine.
  std::string crlf;
  for (char ch : good) crlf += ch == '\n' ? std::string("\r\n") : std::string(1, ch);
  write_text(path, crlf + "\n\n");
  const auto ok = read_lammps_dump(path, {"O", "H"}, predict_keys());
  EXPECT_EQ(ok[0].coord, (std::vector<double>{0, 0, 0, 1, 0, 0}));
}
