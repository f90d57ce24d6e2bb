#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "data/load.h"
#include "data/npy.h"
#include "error.h"
#include "test_util.h"

// Each case writes bad data into a temporary folder, then checks both layers:
//  - the library: load_systems throws mlip::Error whose message holds the key phrases;
//  - the CLI: `mlip neighbor-stat -s <path> -r 6 -t O H` exits non-zero without crashing and
//    prints the same message as `mlip: error: ...` on stderr.

namespace fs = std::filesystem;
using mlip::data::write_npy;
using mlip::test::TempDir;
using mlip::test::write_text;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

/// Coordinates of nf frames of natoms atoms, well separated (>= 1 Å) inside a 10 Å box.
std::vector<double> coords(int64_t nf, int64_t natoms) {
  std::vector<double> c;
  for (int64_t f = 0; f < nf; ++f) {
    for (int64_t a = 0; a < natoms; ++a) {
      c.push_back(1.0 + 1.5 * static_cast<double>(a) + 0.1 * static_cast<double>(f));
      c.push_back(2.0 + 0.5 * static_cast<double>(a % 2));
      c.push_back(3.0);
    }
  }
  return c;
}

std::vector<double> boxes(int64_t nf, double a = 10.0) {
  std::vector<double> b;
  for (int64_t f = 0; f < nf; ++f) {
    for (double v : {a, 0.0, 0.0, 0.0, a, 0.0, 0.0, 0.0, a}) b.push_back(v);
  }
  return b;
}

/// A valid water-like system: 3 atoms (O H H), nf frames in one set.
void write_system(const std::string& dir, int64_t nf = 2, const std::string& set = "set.000") {
  write_text(dir + "/type.raw", "0 1 1\n");
  write_text(dir + "/type_map.raw", "O H\n");
  const std::string s = dir + "/" + set;
  fs::create_directories(s);
  write_npy(s + "/coord.npy", {nf, 9}, coords(nf, 3));
  write_npy(s + "/box.npy", {nf, 9}, boxes(nf));
  write_npy(s + "/energy.npy", {nf}, std::vector<double>(nf, -10.0));
  write_npy(s + "/force.npy", {nf, 9}, std::vector<double>(nf * 9, 0.1));
}

/// A .npy image with a hand-written header dict (padded to 64 bytes) and raw data bytes.
std::string npy_image(const std::string& dict, const std::string& data) {
  std::string header = dict;
  const size_t total = 10 + header.size() + 1;
  header.append((total + 63) / 64 * 64 - total, ' ');
  header.push_back('\n');
  std::string out = std::string("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  return out + header + data;
}

const char* kProps = "Properties=species:S:1:pos:R:3:forces:R:3 ";
const char* kLattice = "Lattice=\"10 0 0 0 10 0 0 0 10\" ";

/// One valid periodic frame of a water molecule.
std::string xyz_frame() {
  return "3\n" + std::string(kLattice) + kProps + "energy=-14.2 pbc=\"T T T\"\n"
         "O 1.0 1.0 1.0 0.1 0.2 0.3\n"
         "H 1.9 1.0 1.0 0.0 0.1 0.0\n"
         "H 1.0 1.9 1.0 0.0 0.0 0.1\n";
}

std::string cli(const std::string& path) {
  return std::string(MLIP_EXE) + " neighbor-stat -s '" + path + "' -r 6 -t O H";
}

/// Checks that loading `path` with type_map [O, H] fails with a message holding every phrase,
/// through the library and through the CLI.
void expect_bad(const std::string& path, const std::vector<std::string>& phrases) {
  std::string msg = "(no error)";
  try {
    std::vector<std::string> type_map = {"O", "H"};
    mlip::data::load_systems({path}, type_map);
  } catch (const mlip::Error& e) {
    msg = e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected mlip::Error, got another exception: " << e.what();
    return;
  }
  for (const std::string& p : phrases) {
    EXPECT_TRUE(contains(msg, p)) << "library message: " << msg << "\n  missing: " << p;
  }

  mlip::test::CommandResult r = mlip::test::run_command(cli(path));
  EXPECT_NE(r.exit_code, 0) << "stdout: " << r.out << "\nstderr: " << r.err;
  EXPECT_LT(r.exit_code, 128) << "crashed (signal " << r.exit_code - 128 << "): " << r.err;
  EXPECT_TRUE(contains(r.err, "mlip: error: ")) << r.err;
  for (const std::string& p : phrases) {
    EXPECT_TRUE(contains(r.err, p)) << "stderr: " << r.err << "\n  missing: " << p;
  }
}

}  // namespace

// --- controls: the same data without the defect loads and runs ------------------------------

TEST(BadInput, ControlValidSystemRuns) {
  TempDir tmp;
  write_system(tmp / "sys");
  mlip::test::CommandResult r = mlip::test::run_command(cli(tmp / "sys"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty() || !contains(r.err, "error")) << r.err;
}

TEST(BadInput, ControlValidExtxyzRuns) {
  TempDir tmp;
  write_text(tmp / "w.xyz", xyz_frame() + xyz_frame());
  mlip::test::CommandResult r = mlip::test::run_command(cli(tmp / "w.xyz"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// --- DeePMD folders -------------------------------------------------------------------------

TEST(BadInput, MissingTypeRaw) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_system(dir);
  fs::remove(dir + "/type.raw");
  expect_bad(dir, {dir + ": no DeePMD system found", "type.raw", "set.*"});
}

TEST(BadInput, TypeRawNonInteger) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_system(dir);
  write_text(dir + "/type.raw", "0 1 H\n");
  expect_bad(dir, {dir + "/type.raw", "integer type id for atom 2", "got 'H'"});
}

TEST(BadInput, NatomsInTypeRawDiffersFromCoordWidth) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_system(dir);
  write_text(dir + "/type.raw", "0 1 1 1\n");
  expect_bad(dir, {dir + "/set.000/coord.npy", "expected shape [nframes, 12]",
                   "natoms 4 from type.raw", "got [2, 9]"});
}

TEST(BadInput, ForceFrameCountDiffersFromCoord) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_system(dir);
  write_npy(dir + "/set.000/force.npy", {3, 9}, std::vector<double>(27, 0.0));
  expect_bad(dir, {dir + "/set.000/force.npy", "expected shape [2, 9]", "nframes 2 from coord.npy",
                   "got [3, 9]"});
}

TEST(BadInput, EnergyFrameCountDiffersFromCoord) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_system(dir);
  write_npy(dir + "/set.000/energy.npy", {1}, {-10.0});
  expect_bad(dir, {dir + "/set.000/energy.npy", "expected shape [2]", "got [1]"});
}

TEST(BadInput, ForceWidthDiffersFromNatoms) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_system(dir);
  write_npy(dir + "/set.000/force.npy", {2, 6}, std::vector<double>(12, 0.0));
  expect_bad(dir, {dir + "/set.000/force.npy", "expected shape [2, 9]", "natoms 3 from type.raw",
                   "got [2, 6]"});
}

TEST(BadInput, NanInCoordinates) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_system(dir);
  std::vector<double> c = coords(2, 3);
  c[9 + 3 * 2 + 0] = kNaN;  // frame 1, atom 2, x
  write_npy(dir + "/set.000/coord.npy", {2, 9}, c);
  expect_bad(dir, {"system " + dir, "frame 1, atom 2", "coordinate x is NaN"});
}

TEST(BadInput, InfInCoordinates) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_system(dir);
  std::vector<double> c = coords(2, 3);
  c[2] = -kInf;  // frame 0, atom 0, z
  write_npy(dir + "/set.000/coord.npy", {2, 9}, c);
  expect_bad(dir, {"system " + dir, "frame 0, atom 0", "coordinate z is Inf"});
}

TEST(BadInput, NanInForcesAndEnergy) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_system(dir);
  std::vector<double> f(18, 0.1);
  f[9 + 4] = kNaN;  // frame 1, atom 1, y
  write_npy(dir + "/set.000/force.npy", {2, 9}, f);
  expect_bad(dir, {"frame 1, atom 1: force y is NaN"});
  write_system(dir);
  write_npy(dir + "/set.000/energy.npy", {2}, {-10.0, kInf});
  expect_bad(dir, {"frame 1: energy is Inf"});
}

TEST(BadInput, BoxMissingWithoutNopbc) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_system(dir);
  fs::remove(dir + "/set.000/box.npy");
  expect_bad(dir, {dir + "/set.000/box.npy: not found", "nopbc"});
}

TEST(BadInput, SingularCell) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_system(dir);
  std::vector<double> b = boxes(2);
  // Frame 1: c = a + b (coplanar cell vectors).
  b[9 + 6] = 10.0;
  b[9 + 7] = 10.0;
  b[9 + 8] = 0.0;
  write_npy(dir + "/set.000/box.npy", {2, 9}, b);
  expect_bad(dir, {"system " + dir, "frame 1: singular cell", "determinant"});
}

TEST(BadInput, ZeroCellVector) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_system(dir);
  write_npy(dir + "/set.000/box.npy", {2, 9}, std::vector<double>(18, 0.0));
  expect_bad(dir, {"frame 0: cell vector 0 is zero in a periodic direction"});
}

TEST(BadInput, ElementAbsentFromTypeMap) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_system(dir);
  write_text(dir + "/type_map.raw", "O H C\n");
  write_text(dir + "/type.raw", "2 1 1\n");
  expect_bad(dir, {dir + "/type_map.raw", "element 'C'", "not in the model's type_map [O, H]"});
}

TEST(BadInput, TruncatedNpy) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_system(dir);
  write_text(dir + "/set.000/coord.npy",
             npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 9), }",
                       std::string(100, '\0')));
  expect_bad(dir, {dir + "/set.000/coord.npy: truncated",
                   "header says 18 float64 values (144 bytes) but only 100 bytes follow"});
}

TEST(BadInput, WrongMagic) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_system(dir);
  write_text(dir + "/set.000/force.npy", "0.1 0.1 0.1 0.1 0.1 0.1 0.1 0.1 0.1\n");
  expect_bad(dir, {dir + "/set.000/force.npy: not a .npy file (bad magic bytes"});
}

TEST(BadInput, UnsupportedDtypeComplex) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_system(dir);
  write_text(dir + "/set.000/coord.npy",
             npy_image("{'descr': '<c16', 'fortran_order': False, 'shape': (2, 9), }",
                       std::string(2 * 9 * 16, '\0')));
  expect_bad(dir, {dir + "/set.000/coord.npy: unsupported dtype '<c16'",
                   "expected float32/float64 or int32/int64"});
}

TEST(BadInput, UnsupportedDtypeObject) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_system(dir);
  write_text(dir + "/set.000/energy.npy",
             npy_image("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }",
                       "\x80\x02]q\x00."));  // a pickle, as numpy writes object arrays
  expect_bad(dir, {dir + "/set.000/energy.npy: unsupported dtype '|O'"});
}

TEST(BadInput, EmptySetFolder) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_system(dir);
  fs::create_directories(dir + "/set.001");
  expect_bad(dir, {dir + "/set.001/coord.npy: not found", "every set.* folder needs coord.npy"});
}

TEST(BadInput, NoSetFolder) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_text(dir + "/type.raw", "0 1 1\n");
  expect_bad(dir, {dir + ": no set.* folder"});
}

TEST(BadInput, LabelInOnlyOneSet) {
  TempDir tmp;
  const std::string dir = tmp / "sys";
  write_system(dir, 2, "set.000");
  write_system(dir, 1, "set.001");
  fs::remove(dir + "/set.001/force.npy");
  expect_bad(dir, {dir + "/set.001/force.npy: not found, but set.000 has force.npy"});
}

TEST(BadInput, BadSystemInsideAFolderOfSystems) {
  TempDir tmp;
  write_system(tmp / "data/a");
  write_system(tmp / "data/b");
  write_npy(tmp / "data/b/set.000/box.npy", {2, 3}, std::vector<double>(6, 1.0));
  expect_bad(tmp / "data", {tmp / "data/b/set.000/box.npy", "expected shape [2, 9]", "got [2, 3]"});
}

TEST(BadInput, FolderWithoutSystems) {
  TempDir tmp;
  fs::create_directories(tmp / "data/empty");
  write_text(tmp / "data/readme.txt", "nothing here\n");
  expect_bad(tmp / "data", {tmp / "data: no DeePMD system found", "type.raw"});
}

TEST(BadInput, NonexistentPath) {
  TempDir tmp;
  expect_bad(tmp / "does_not_exist", {tmp / "does_not_exist: no such file or folder"});
}

// --- extended XYZ ---------------------------------------------------------------------------

TEST(BadInput, ExtxyzAtomCountTooLarge) {
  TempDir tmp;
  const std::string path = tmp / "bad.xyz";
  std::string frame = xyz_frame();
  frame[0] = '4';
  write_text(path, xyz_frame() + frame);
  expect_bad(path, {path + ":6", "atom count line says 4 atoms", "ends after 3 atom lines"});
}

TEST(BadInput, ExtxyzAtomCountTooSmall) {
  TempDir tmp;
  const std::string path = tmp / "bad.xyz";
  std::string frame = xyz_frame();
  frame[0] = '2';
  write_text(path, frame + xyz_frame());
  expect_bad(path, {path + ":5", "expected the atom count of a frame", "got 'H 1.0 1.9"});
}

TEST(BadInput, ExtxyzMissingForcesColumn) {
  TempDir tmp;
  const std::string path = tmp / "bad.xyz";
  write_text(path, "2\n" + std::string(kLattice) +
                       "Properties=species:S:1:pos:R:3 energy=-1.0 pbc=\"T T T\"\n"
                       "O 1 1 1\nH 2 1 1\n");
  expect_bad(path, {path + ":2", "no forces", "column 'forces' (or 'force') of type R and count 3", "the columns are species, pos"});
}

TEST(BadInput, ExtxyzMissingEnergy) {
  TempDir tmp;
  const std::string path = tmp / "bad.xyz";
  write_text(path, "2\n" + std::string(kLattice) + kProps + "pbc=\"T T T\"\n"
                   "O 1 1 1 0 0 0\nH 2 1 1 0 0 0\n");
  expect_bad(path, {path + ":2", "no energy"});
}

TEST(BadInput, ExtxyzNonNumericCoordinate) {
  TempDir tmp;
  const std::string path = tmp / "bad.xyz";
  write_text(path, "2\n" + std::string(kLattice) + kProps + "energy=-1.0 pbc=\"T T T\"\n"
                   "O 1 1 1 0 0 0\nH 2 1.0.0 1 0 0 0\n");
  expect_bad(path, {path + ":4", "atom 1", "column 'pos'", "expected a number, got '1.0.0'"});
}

TEST(BadInput, ExtxyzPeriodicWithoutLattice) {
  TempDir tmp;
  const std::string path = tmp / "bad.xyz";
  write_text(path, "2\n" + std::string(kProps) + "energy=-1.0 pbc=\"T T T\"\n"
                   "O 1 1 1 0 0 0\nH 2 1 1 0 0 0\n");
  expect_bad(path, {path + ":2", "key 'pbc' is \"T T T\"", "no Lattice"});
}

TEST(BadInput, ExtxyzElementAbsentFromTypeMap) {
  TempDir tmp;
  const std::string path = tmp / "bad.xyz";
  write_text(path, "2\n" + std::string(kLattice) + kProps + "energy=-1.0 pbc=\"T T T\"\n"
                   "C 1 1 1 0 0 0\nH 2 1 1 0 0 0\n");
  expect_bad(path, {path + ":1", "element 'C' is not in the type_map [O, H]"});
}

TEST(BadInput, ExtxyzNanCoordinate) {
  TempDir tmp;
  const std::string path = tmp / "bad.xyz";
  write_text(path, "2\n" + std::string(kLattice) + kProps + "energy=-1.0 pbc=\"T T T\"\n"
                   "O 1 1 nan 0 0 0\nH 2 1 1 0 0 0\n");
  expect_bad(path, {path + "[O1H1]", "frame 0, atom 0: coordinate z is NaN"});
}

// A slab as ASE writes it (pbc "T T F", third cell vector zero) with a stress: the virial
// (-stress * volume) would be zero whatever the stress. Refused; the same slab with a virial loads.
TEST(BadInput, ExtxyzStressOnACellWithoutVolume) {
  TempDir tmp;
  const std::string path = tmp / "slab.xyz";
  const std::string head = "2\nLattice=\"10 0 0 0 10 0 0 0 0\" " + std::string(kProps) + "energy=-1.0 ";
  const std::string atoms = "O 1 1 1 0 0 0\nH 2 1 1 0 0 0\n";
  write_text(path, head + "stress=\"0.01 0 0 0 0.01 0 0 0 0\" pbc=\"T T F\"\n" + atoms);
  expect_bad(path, {path + ":2", "key 'stress' given but the Lattice \"10 0 0 0 10 0 0 0 0\" has no volume",
                    "give the virial"});
  write_text(path, head + "virial=\"-1 0 0 0 -1 0 0 0 0\" pbc=\"T T F\"\n" + atoms);
  std::vector<std::string> type_map = {"O", "H"};
  const auto systems = mlip::data::load_systems({path}, type_map);
  ASSERT_EQ(systems.size(), 1u);
  EXPECT_EQ(systems[0].virial[0], -1.0);
}

// --- Symbolic links in folders of systems (docs/data.md "Folders of systems") ---------------

// A link to its own folder, one two levels up and a second path to a folder already read: each
// real folder is read once, the links are named in notes, and the systems are those without the
// links (independent reference: the same tree without them). Through the library and the CLI.
TEST(BadInput, SymlinkLoopsInFoldersOfSystemsAreWalkedOnce) {
  TempDir tmp;
  write_system(tmp / "root/a/sys1", 2);
  write_system(tmp / "root/b/sys2", 3);
  std::vector<std::string> type_map = {"O", "H"};
  const auto plain = mlip::data::load_systems({tmp / "root"}, type_map);
  ASSERT_EQ(plain.size(), 2u);
  fs::create_directory_symlink(".", tmp / "root/a/self");
  fs::create_directory_symlink("../..", tmp / "root/a/up");
  fs::create_directory_symlink("../a", tmp / "root/b/again");
  const auto linked = mlip::data::load_systems({tmp / "root"}, type_map);
  ASSERT_EQ(linked.size(), plain.size());
  for (size_t k = 0; k < plain.size(); ++k) {
    EXPECT_EQ(linked[k].name, plain[k].name);
    EXPECT_EQ(linked[k].nframes, plain[k].nframes);
  }
  mlip::test::CommandResult r = mlip::test::run_command(cli(tmp / "root"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "2 system(s), 5 frame(s)")) << r.out;
  EXPECT_TRUE(contains(r.out, "note: ")) << r.out;
  EXPECT_TRUE(contains(r.out, "/root/a/self (a symbolic link): it leads to a folder already read")) << r.out;
  EXPECT_TRUE(contains(r.out, "/root/b/again (a symbolic link): it leads to a folder already read")) << r.out;
}
