// DeePMD HDF5 systems (src/data/hdf5_system.h) read like their npy twins, frame for frame and
// bit for bit; malformed files get messages as clear as npy's; training from an HDF5 twin gives
// the same lcurve as from the npy folders.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>

#include "data/deepmd_system.h"
#include "data/hdf5_system.h"
#include "data/load.h"
#include "data/npy.h"
#include "test_util.h"

#ifdef MLIP_HAVE_HDF5
#include <hdf5.h>
#endif

namespace fs = std::filesystem;
using mlip::data::System;
using mlip::test::contains;
using mlip::test::error_of;
using mlip::test::TempDir;

namespace {

#ifdef MLIP_HAVE_HDF5

/// Writes HDF5 files as dpdata does (groups, datasets named *.npy / *.raw), for the tests.
class Writer {
 public:
  explicit Writer(const std::string& path) : file_(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)) {}
  ~Writer() { H5Fclose(file_); }
  void group(const std::string& path) {
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    H5Gclose(H5Gcreate2(file_, path.c_str(), lcpl, H5P_DEFAULT, H5P_DEFAULT));
    H5Pclose(lcpl);
  }
  /// A float dataset (float32 when single) of shape `dims` holding `values`.
  void floats(const std::string& path, const std::vector<hsize_t>& dims, const std::vector<double>& values,
              bool single = false) {
    hid_t space = H5Screate_simple(int(dims.size()), dims.data(), nullptr);
    hid_t d = H5Dcreate2(file_, path.c_str(), single ? H5T_IEEE_F32LE : H5T_IEEE_F64LE, space, lcpl(), H5P_DEFAULT,
                         H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
    H5Dclose(d);
    H5Sclose(space);
  }
  void ints(const std::string& path, const std::vector<long long>& values) {
    const hsize_t n = values.size();
    hid_t space = H5Screate_simple(1, &n, nullptr);
    hid_t d = H5Dcreate2(file_, path.c_str(), H5T_STD_I64LE, space, lcpl(), H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_LLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
    H5Dclose(d);
    H5Sclose(space);
  }
  /// Fixed-length byte strings (numpy dtype "S"), as dpdata writes type_map.raw.
  void strings(const std::string& path, const std::vector<std::string>& values) {
    size_t width = 1;
    for (auto& v : values) width = std::max(width, v.size());
    std::string buffer;
    for (auto& v : values) buffer += v + std::string(width - v.size(), '\0');
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, width);
    const hsize_t n = values.size();
    hid_t space = H5Screate_simple(1, &n, nullptr);
    hid_t d = H5Dcreate2(file_, path.c_str(), type, space, lcpl(), H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer.data());
    H5Dclose(d);
    H5Sclose(space);
    H5Tclose(type);
  }
  /// Variable-length UTF-8 strings, as h5py writes a list of str: one per element, or one scalar
  /// string (scalar true, values of size 1).
  void utf8_strings(const std::string& path, const std::vector<std::string>& values, bool scalar = false) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_UTF8);
    const hsize_t n = values.size();
    hid_t space = scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr);
    hid_t d = H5Dcreate2(file_, path.c_str(), type, space, lcpl(), H5P_DEFAULT, H5P_DEFAULT);
    std::vector<const char*> pointers;
    for (const std::string& v : values) pointers.push_back(v.c_str());
    H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, pointers.data());
    H5Dclose(d);
    H5Sclose(space);
    H5Tclose(type);
  }
  /// A string dataset of shape [0] (fixed length, or variable-length UTF-8).
  void no_strings(const std::string& path, bool variable) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, variable ? H5T_VARIABLE : 4);
    const hsize_t n = 0;
    hid_t space = H5Screate_simple(1, &n, nullptr);
    H5Dclose(H5Dcreate2(file_, path.c_str(), type, space, lcpl(), H5P_DEFAULT, H5P_DEFAULT));
    H5Sclose(space);
    H5Tclose(type);
  }
  /// A float64 dataset of shape `dims` declared and never written: contiguous (chunk empty) or
  /// in chunks of shape `chunk`.
  void unwritten(const std::string& path, const std::vector<hsize_t>& dims, const std::vector<hsize_t>& chunk) {
    hid_t space = H5Screate_simple(int(dims.size()), dims.data(), nullptr);
    hid_t create = H5Pcreate(H5P_DATASET_CREATE);
    if (!chunk.empty()) H5Pset_chunk(create, int(chunk.size()), chunk.data());
    hid_t d = H5Dcreate2(file_, path.c_str(), H5T_IEEE_F64LE, space, lcpl(), create, H5P_DEFAULT);
    EXPECT_GE(d, 0) << path;
    H5Dclose(d);
    H5Pclose(create);
    H5Sclose(space);
  }
  /// A float64 dataset of shape `dims` stored in chunks of shape `chunk`, of which only the
  /// first `rows` rows of `values` are written.
  void chunked_floats(const std::string& path, const std::vector<hsize_t>& dims, const std::vector<hsize_t>& chunk,
                      const std::vector<double>& values, hsize_t rows) {
    hid_t space = H5Screate_simple(int(dims.size()), dims.data(), nullptr);
    hid_t create = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(create, int(chunk.size()), chunk.data());
    hid_t d = H5Dcreate2(file_, path.c_str(), H5T_IEEE_F64LE, space, lcpl(), create, H5P_DEFAULT);
    std::vector<hsize_t> start(dims.size(), 0), count = dims;
    count[0] = rows;
    H5Sselect_hyperslab(space, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
    hid_t memory = H5Screate_simple(int(count.size()), count.data(), nullptr);
    H5Dwrite(d, H5T_NATIVE_DOUBLE, memory, space, H5P_DEFAULT, values.data());
    H5Sclose(memory);
    H5Dclose(d);
    H5Pclose(create);
    H5Sclose(space);
  }
  /// A hard link `link` to the object at `target`.
  void hard_link(const std::string& target, const std::string& link) {
    H5Lcreate_hard(file_, target.c_str(), file_, link.c_str(), H5P_DEFAULT, H5P_DEFAULT);
  }
  /// A soft link `link` to the path `target`.
  void soft_link(const std::string& target, const std::string& link) {
    H5Lcreate_soft(target.c_str(), file_, link.c_str(), H5P_DEFAULT, H5P_DEFAULT);
  }
  /// A system group from an in-memory system: its frames split over `sets` set.* groups.
  void system(const std::string& group, const System& s, int sets, bool single = false) {
    std::vector<long long> types(s.types.begin(), s.types.end());
    ints(group + "/type.raw", types);
    strings(group + "/type_map.raw", s.type_map);
    if (!s.has_box()) ints(group + "/nopbc", {1});
    const hsize_t n3 = hsize_t(s.natoms()) * 3;
    int64_t first = 0;
    for (int k = 0; k < sets; ++k) {
      const int64_t count = s.nframes / sets + (k < s.nframes % sets ? 1 : 0);
      char name[32];
      std::snprintf(name, sizeof name, "/set.%03d", k);
      const std::string g = group + name;
      auto rows = [&](const std::vector<double>& v, size_t per) {
        return std::vector<double>(v.begin() + long(size_t(first) * per), v.begin() + long(size_t(first + count) * per));
      };
      floats(g + "/coord.npy", {hsize_t(count), n3}, rows(s.coord, n3), single);
      if (s.has_box()) floats(g + "/box.npy", {hsize_t(count), 9}, rows(s.box, 9), single);
      floats(g + "/energy.npy", {hsize_t(count)}, rows(s.energy, 1), single);
      floats(g + "/force.npy", {hsize_t(count), n3}, rows(s.force, n3), single);
      if (!s.virial.empty()) floats(g + "/virial.npy", {hsize_t(count), 9}, rows(s.virial, 9), single);
      if (!s.charge.empty())
        floats(g + "/charge.npy", {hsize_t(count), hsize_t(s.natoms())}, rows(s.charge, size_t(s.natoms())), single);
      first += count;
    }
  }

 private:
  static hid_t lcpl() {
    static hid_t p = [] {
      hid_t l = H5Pcreate(H5P_LINK_CREATE);
      H5Pset_create_intermediate_group(l, 1);
      return l;
    }();
    return p;
  }
  hid_t file_;
};

void expect_same_frames(const System& hdf5, const System& npy, bool single) {
  ASSERT_EQ(hdf5.nframes, npy.nframes);
  EXPECT_EQ(hdf5.types, npy.types);
  EXPECT_EQ(hdf5.type_map, npy.type_map);
  EXPECT_EQ(hdf5.pbc, npy.pbc);
  EXPECT_EQ(hdf5.has_box(), npy.has_box());
  EXPECT_EQ(hdf5.has_virial, !npy.virial.empty());
  EXPECT_EQ(hdf5.has_charge, !npy.charge.empty());
  auto rounded = [&](std::vector<double> v) {
    if (single)
      for (double& x : v) x = double(float(x));
    return v;
  };
  for (int64_t f = 0; f < npy.nframes; ++f) {
    const auto a = hdf5.frame(f);
    const auto b = npy.frame(f);
    EXPECT_EQ(a.coord, rounded(b.coord)) << "frame " << f;
    EXPECT_EQ(a.box, rounded(b.box)) << "frame " << f;
    EXPECT_EQ(a.energy, rounded(b.energy)) << "frame " << f;
    EXPECT_EQ(a.force, rounded(b.force)) << "frame " << f;
    EXPECT_EQ(a.virial, rounded(b.virial)) << "frame " << f;
    EXPECT_EQ(a.charge, rounded(b.charge)) << "frame " << f;
  }
}

TEST(Hdf5System, ReadsLikeItsNpyTwin) {
  TempDir tmp;
  // A periodic system with virials (the shared DFT water when present) and a cluster (nopbc)
  // with charge labels.
  std::vector<System> twins;
  const std::string water = mlip::test::shared_water_dir();
  if (!water.empty()) {
    twins.push_back(mlip::data::read_deepmd_system(water + "/data_0", {"O", "H"}));
  } else {
    std::cout << "[ note ] ../shared/data/water not found: the periodic twin is a synthetic system\n";
  }
  mlip::test::write_system(tmp / "cluster", 3, 6, 7, 4);
  std::vector<double> charges;
  for (int k = 0; k < 7 * 9; ++k) charges.push_back(0.1 * (k % 9) - 0.4 + 0.003 * k);
  mlip::data::write_npy(tmp / "cluster/set.000/charge.npy", {7, 9}, charges);
  twins.push_back(mlip::data::read_deepmd_system(tmp / "cluster", {"O", "H"}));
  for (bool single : {false, true}) {
    const std::string path = tmp / (single ? "f32.hdf5" : "f64.hdf5");
    {
      Writer w(path);
      for (size_t k = 0; k < twins.size(); ++k) w.system("/sys" + std::to_string(k), twins[k], 3, single);
    }
    auto systems = mlip::data::open_hdf5_systems(path, "", {"O", "H"});
    ASSERT_EQ(systems.size(), twins.size());
    for (size_t k = 0; k < twins.size(); ++k) {
      EXPECT_EQ(systems[k].name, path + "#/sys" + std::to_string(k));
      expect_same_frames(systems[k], twins[k], single);
    }
    // Through load_systems: the whole file, one group by `#`, in memory and streamed.
    std::vector<std::string> type_map{"O", "H"};
    auto one = mlip::data::load_systems({path + "#/sys0"}, type_map);
    ASSERT_EQ(one.size(), 1u);
    EXPECT_TRUE(one[0].in_memory());
    expect_same_frames(one[0], twins[0], single);
    auto all = mlip::data::load_systems({path}, type_map, "", mlip::data::Loading::kStreamed);
    EXPECT_EQ(all.size(), twins.size());
  }
}

TEST(Hdf5System, MalformedFilesAreClearErrors) {
  TempDir tmp;
  mlip::test::write_system(tmp / "npy", 2, 4, 4, 1);
  const System s = mlip::data::read_deepmd_system(tmp / "npy", {"O", "H"});
  const std::vector<std::string> oh{"O", "H"};
  auto make = [&](const std::string& name, const std::function<void(Writer&)>& edit) {
    const std::string path = tmp / name;
    Writer w(path);
    edit(w);
    return path;
  };
  // A missing dataset.
  std::string p = make("missing.hdf5", [&](Writer& w) {
    w.ints("/s/type.raw", {0, 0, 1, 1, 1, 1});
    w.ints("/s/nopbc", {1});
    w.floats("/s/set.000/energy.npy", {4}, s.energy);
  });
  std::string msg = error_of([&] { mlip::data::open_hdf5_systems(p, "", oh); });
  EXPECT_TRUE(contains(msg, p + "#/s/set.000/coord.npy: not found")) << msg;
  // A wrong shape: forces of 5 atoms for 6.
  p = make("shape.hdf5", [&](Writer& w) {
    w.system("/s", s, 1);
    w.floats("/t/set.000/coord.npy", {4, 18}, s.coord);
    w.ints("/t/type.raw", {0, 0, 1, 1, 1, 1});
    w.ints("/t/nopbc", {1});
    w.floats("/t/set.000/force.npy", {4, 15}, std::vector<double>(60, 0.0));
  });
  msg = error_of([&] { mlip::data::open_hdf5_systems(p, "", oh); });
  EXPECT_TRUE(contains(msg, p + "#/t/set.000/force.npy: expected shape [4, 18]")) << msg;
  EXPECT_TRUE(contains(msg, "got [4, 15]")) << msg;
  // A wrong dtype: integer coordinates.
  p = make("dtype.hdf5", [&](Writer& w) {
    w.ints("/s/type.raw", {0, 0, 1, 1, 1, 1});
    w.ints("/s/nopbc", {1});
    w.ints("/s/set.000/coord.npy", std::vector<long long>(72, 1));
  });
  msg = error_of([&] { mlip::data::open_hdf5_systems(p, "", oh); });
  EXPECT_TRUE(contains(msg, p + "#/s/set.000/coord.npy: unsupported dtype int64 (expected float32 or float64)")) << msg;
  // A truncated file.
  const std::string whole = make("whole.hdf5", [&](Writer& w) { w.system("/s", s, 1); });
  {
    std::ifstream in(whole, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(tmp / "cut.hdf5", std::ios::binary) << bytes.substr(0, bytes.size() * 2 / 3);
  }
  msg = error_of([&] { mlip::data::open_hdf5_systems(tmp / "cut.hdf5", "", oh); });
  EXPECT_TRUE(contains(msg, tmp / "cut.hdf5")) << msg;
  EXPECT_TRUE(contains(msg, "truncated") || contains(msg, "damaged")) << msg;
  // Not HDF5 at all, a group that is not there, an element outside the type map.
  std::ofstream(tmp / "text.hdf5") << "not hdf5\n";
  msg = error_of([&] { mlip::data::open_hdf5_systems(tmp / "text.hdf5", "", oh); });
  EXPECT_TRUE(contains(msg, "not an HDF5 file")) << msg;
  msg = error_of([&] { mlip::data::open_hdf5_systems(whole, "/nothing", oh); });
  EXPECT_TRUE(contains(msg, whole + "#/nothing: no such group")) << msg;
  msg = error_of([&] { mlip::data::open_hdf5_systems(whole, "", {"O"}); });
  EXPECT_TRUE(contains(msg, "element 'H'")) << msg;
  EXPECT_TRUE(contains(msg, "not in the model's type_map")) << msg;
}

TEST(Hdf5System, TrainingFromTheTwinGivesTheSameLcurve) {
  TempDir tmp;
  mlip::test::write_system(tmp / "data/sys_a", 2, 4, 8, 1);
  mlip::test::write_system(tmp / "data/sys_v", 2, 4, 5, 3);
  {
    Writer w(tmp / "data.hdf5");
    w.system("/train", mlip::data::read_deepmd_system(tmp / "data/sys_a", {"O", "H"}), 2);
    w.system("/valid", mlip::data::read_deepmd_system(tmp / "data/sys_v", {"O", "H"}), 1);
  }
  auto input = [](const std::string& train, const std::string& valid) {
    return "model:\n"
           "  type_map: [O, H]\n"
           "  descriptor: {type: se_e2_a, sel: [8, 16], rcut: 4.0, rcut_smth: 1.0, neuron: [4, 8], axis_neuron: 4, seed: 3}\n"
           "  fitting_net: {neuron: [8, 8], seed: 3}\n"
           "learning_rate: {type: exp, start_lr: 0.005, stop_lr: 1.0e-4, decay_steps: 5}\n"
           "loss: {type: ener, start_pref_e: 0.02, limit_pref_e: 1, start_pref_f: 1000, limit_pref_f: 1}\n"
           "training:\n"
           "  training_data: {systems: [" + train + "], batch_size: 2}\n"
           "  validation_data: {systems: [" + valid + "], batch_size: 2, numb_btch: 2}\n"
           "  numb_steps: 20\n  seed: 5\n  disp_freq: 5\n";
  };
  mlip::test::write_text(tmp / "npy.yaml", input("data/sys_a", "data/sys_v"));
  mlip::test::write_text(tmp / "hdf5.yaml", input("data.hdf5#/train", "data.hdf5#/valid"));
  for (const char* name : {"npy", "hdf5"}) {
    auto r = mlip::test::run_command("cd " + tmp.path() + " && " + MLIP_EXE + " train " + name + ".yaml -o " + name);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }
  auto read = [&](const std::string& p) {
    std::ifstream f(tmp / p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  EXPECT_FALSE(read("npy/lcurve.out").empty());
  EXPECT_EQ(read("hdf5/lcurve.out"), read("npy/lcurve.out"));
}

// ---- HDF5 cases that failed badly (issue 27, docs/data.md "HDF5 systems"): each works or is an
// error naming the file and the object.

/// A system of 2 O and 4 H (type.raw and type_map.raw written by `types`) with the frames of
/// `s`, at `group`.
void system_with_types(Writer& w, const std::string& group, const System& s,
                       const std::function<void(Writer&)>& types) {
  types(w);
  w.ints(group + "/nopbc", {1});
  const hsize_t n3 = hsize_t(s.natoms()) * 3;
  w.floats(group + "/set.000/coord.npy", {hsize_t(s.nframes), n3}, s.coord);
  w.floats(group + "/set.000/energy.npy", {hsize_t(s.nframes)}, s.energy);
  w.floats(group + "/set.000/force.npy", {hsize_t(s.nframes), n3}, s.force);
}

// Label keys (docs/data.md "Label keys"): labels stored as <key>.npy read, with the keys, as the
// default names do, streamed; a key whose dataset is missing is an error naming the group.
TEST(Hdf5System, LabelsUnderTheirOwnKeys) {
  TempDir tmp;
  mlip::test::write_system(tmp / "cluster", 3, 6, 7, 4);
  const System s = mlip::data::read_deepmd_system(tmp / "cluster", {"O", "H"});
  const std::string path = tmp / "keys.hdf5";
  {
    Writer w(path);
    w.ints("/sys/type.raw", std::vector<long long>(s.types.begin(), s.types.end()));
    w.ints("/sys/nopbc", {1});
    const hsize_t n3 = hsize_t(s.natoms()) * 3;
    w.floats("/sys/set.000/coord.npy", {hsize_t(s.nframes), n3}, s.coord);
    w.floats("/sys/set.000/REF_energy.npy", {hsize_t(s.nframes)}, s.energy);
    w.floats("/sys/set.000/REF_force.npy", {hsize_t(s.nframes), n3}, s.force);
  }
  mlip::data::LabelKeys keys;
  keys.energy = "REF_energy", keys.forces = "REF_force";
  auto systems = mlip::data::open_hdf5_systems(path, "", {"O", "H"}, keys);
  ASSERT_EQ(systems.size(), 1u);
  ASSERT_TRUE(systems[0].has_energy && systems[0].has_force);
  for (int64_t f = 0; f < s.nframes; ++f) {
    const auto frame = systems[0].frame(f);
    EXPECT_EQ(frame.energy, std::vector<double>{s.energy[size_t(f)]});
    EXPECT_EQ(frame.force, std::vector<double>(s.force.begin() + f * 3 * s.natoms(), s.force.begin() + (f + 1) * 3 * s.natoms()));
  }
  keys.forces = "DFT_force";
  const std::string msg = error_of([&] { mlip::data::open_hdf5_systems(path, "", {"O", "H"}, keys); });
  EXPECT_TRUE(contains(msg, path + "#/sys/set.000: forces_key 'DFT_force': no DFT_force.npy here")) << msg;
}

/// `mlip neighbor-stat -s <system>` through the real CLI, under a time limit (a cycle must not
/// hang it): exit 1 and `needle` in the message, or exit 0 when needle is empty.
void expect_cli(const std::string& system, const std::string& needle) {
  const auto r = mlip::test::run_command("timeout 120 " + std::string(MLIP_EXE) + " neighbor-stat -s '" + system +
                                         "' -r 3 -t O H");
  if (needle.empty()) {
    EXPECT_EQ(r.exit_code, 0) << system << "\n" << r.out << r.err;
    return;
  }
  EXPECT_EQ(r.exit_code, 1) << system << "\n" << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "mlip: error: ")) << r.err;
  EXPECT_TRUE(contains(r.err, needle)) << r.err;
}

TEST(Hdf5System, VariableLengthUtf8StringsAreRead) {
  TempDir tmp;
  mlip::test::write_system(tmp / "npy", 2, 4, 3, 1);
  const System npy = mlip::data::read_deepmd_system(tmp / "npy", {"O", "H"});
  ASSERT_EQ(npy.types, (std::vector<int>{0, 0, 1, 1, 1, 1}));
  // type_map.raw as h5py writes a list of str (names in the other order, so that reading them
  // wrong would show); type.raw as one UTF-8 string, and as one string per atom.
  const std::string p = tmp / "utf8.hdf5";
  {
    Writer w(p);
    system_with_types(w, "/one", npy, [](Writer& w) {
      w.utf8_strings("/one/type_map.raw", {"H", "O"});
      w.utf8_strings("/one/type.raw", {"1 1 0 0 0 0"}, true);
    });
    system_with_types(w, "/per_atom", npy, [](Writer& w) {
      w.utf8_strings("/per_atom/type_map.raw", {"H", "O"});
      w.utf8_strings("/per_atom/type.raw", {"1", "1", "0", "0", "0", "0"});
    });
  }
  for (const char* group : {"/one", "/per_atom"}) {
    std::vector<System> systems;
    ASSERT_NO_THROW(systems = mlip::data::open_hdf5_systems(p, group, {"O", "H"})) << group;
    ASSERT_EQ(systems.size(), 1u);
    EXPECT_EQ(systems[0].types, npy.types) << group;
    EXPECT_EQ(systems[0].frame(2).coord, npy.frame(2).coord) << group;
  }
  // Without a model type_map, the file's own names in its order.
  const std::vector<System> own = mlip::data::open_hdf5_systems(p, "/one", {});
  EXPECT_EQ(own[0].type_map, (std::vector<std::string>{"H", "O"}));
  EXPECT_EQ(own[0].types, (std::vector<int>{1, 1, 0, 0, 0, 0}));
  expect_cli(p + "#/one", "");
  expect_cli(p + "#/per_atom", "");
}

TEST(Hdf5System, EmptyStringDatasetsAreNamedErrors) {
  TempDir tmp;
  mlip::test::write_system(tmp / "npy", 2, 4, 3, 1);
  const System npy = mlip::data::read_deepmd_system(tmp / "npy", {"O", "H"});
  const std::string p = tmp / "empty.hdf5";
  {
    Writer w(p);
    system_with_types(w, "/fixed", npy, [](Writer& w) { w.no_strings("/fixed/type.raw", false); });
    system_with_types(w, "/variable", npy, [](Writer& w) { w.no_strings("/variable/type.raw", true); });
    system_with_types(w, "/map", npy, [](Writer& w) {
      w.ints("/map/type.raw", {0, 0, 1, 1, 1, 1});
      w.no_strings("/map/type_map.raw", true);
    });
  }
  for (const char* group : {"/fixed", "/variable"}) {
    const std::string msg = error_of([&] { mlip::data::open_hdf5_systems(p, group, {"O", "H"}); });
    EXPECT_TRUE(contains(msg, p + "#" + group + "/type.raw: expected text of integer type ids (one per atom), got an "
                              "empty string dataset (shape [0])"))
        << msg;
  }
  const std::string msg = error_of([&] { mlip::data::open_hdf5_systems(p, "/map", {"O", "H"}); });
  EXPECT_TRUE(contains(msg, p + "#/map/type.raw: type id 1 is out of range for " + p + "#/map/type_map.raw which "
                            "names 0 types"))
      << msg;
  expect_cli(p + "#/fixed", p + "#/fixed/type.raw: expected text of integer type ids (one per atom), got an empty string dataset");
}

TEST(Hdf5System, ShapesDeclaredBeyondTheFileAreNamedErrors) {
  TempDir tmp;
  const std::string p = tmp / "huge.hdf5";
  const hsize_t frames = 1000000000000ull;  // 10^12 frames of 2 atoms: 48 TB
  {
    Writer w(p);
    w.ints("/contiguous/type.raw", {0, 1});
    w.ints("/contiguous/nopbc", {1});
    w.unwritten("/contiguous/set.000/coord.npy", {frames, 6}, {});
    w.ints("/chunked/type.raw", {0, 1});
    w.ints("/chunked/nopbc", {1});
    w.unwritten("/chunked/set.000/coord.npy", {frames, 6}, {1000, 6});
    w.unwritten("/types/type.raw", {frames}, {4096});
  }
  std::string msg = error_of([&] { mlip::data::open_hdf5_systems(p, "/contiguous", {"O", "H"}); });
  EXPECT_TRUE(contains(msg, p + "#/contiguous/set.000/coord.npy: declares shape [1000000000000, 6] (48000000000000 "
                            "bytes of float64) but none of it is stored in the file; the file has "))
      << msg;
  msg = error_of([&] { mlip::data::open_hdf5_systems(p, "/chunked", {"O", "H"}); });
  EXPECT_TRUE(contains(msg, p + "#/chunked/set.000/coord.npy: declares shape [1000000000000, 6] (48000000000000 "
                            "bytes of float64) in 1000000000 chunks, but only 0 of them are stored in the file"))
      << msg;
  msg = error_of([&] { mlip::data::open_hdf5_systems(p, "/types", {"O", "H"}); });
  EXPECT_TRUE(contains(msg, p + "#/types/type.raw: declares shape [1000000000000]")) << msg;
  expect_cli(p + "#/chunked", p + "#/chunked/set.000/coord.npy: declares shape [1000000000000, 6]");

  // Chunked data with every chunk written reads as it was written; with a chunk missing (a
  // frame never written) it is refused.
  mlip::test::write_system(tmp / "npy", 2, 4, 3, 1);
  const System npy = mlip::data::read_deepmd_system(tmp / "npy", {"O", "H"});
  const std::string q = tmp / "chunked.hdf5";
  {
    Writer w(q);
    for (const char* group : {"/whole", "/partial"}) {
      const std::string g = group;
      w.ints(g + "/type.raw", {0, 0, 1, 1, 1, 1});
      w.ints(g + "/nopbc", {1});
      w.chunked_floats(g + "/set.000/coord.npy", {3, 18}, {1, 18}, npy.coord, g == "/whole" ? 3 : 2);
    }
  }
  const std::vector<System> whole = mlip::data::open_hdf5_systems(q, "/whole", {"O", "H"});
  EXPECT_EQ(whole[0].frame(2).coord, npy.frame(2).coord);
  msg = error_of([&] { mlip::data::open_hdf5_systems(q, "/partial", {"O", "H"}); });
  EXPECT_TRUE(contains(msg, q + "#/partial/set.000/coord.npy: declares shape [3, 18] (432 bytes of float64) in 3 "
                            "chunks, but only 2 of them are stored in the file"))
      << msg;
}

TEST(Hdf5System, GroupsThatLinkToThemselvesAreNamedErrors) {
  TempDir tmp;
  mlip::test::write_system(tmp / "npy", 2, 4, 3, 1);
  const System npy = mlip::data::read_deepmd_system(tmp / "npy", {"O", "H"});
  const std::string p = tmp / "loop.hdf5";
  {
    Writer w(p);
    w.system("/z/sys", npy, 1);
    w.group("/a/b");
    w.hard_link("/a", "/a/b/up");      // /a/b/up is /a
    w.hard_link("/a", "/a/b/up2");     // twice: without the check, 2^depth paths
    w.group("/s");
    w.soft_link("/s", "/s/self");      // by name
  }
  std::string msg = error_of([&] { mlip::data::open_hdf5_systems(p, "", {"O", "H"}); });
  EXPECT_TRUE(contains(msg, p + "#/a/b/up: is the group /a again (a link to a group that holds it: a cycle)")) << msg;
  msg = error_of([&] { mlip::data::open_hdf5_systems(p, "/s", {"O", "H"}); });
  EXPECT_TRUE(contains(msg, p + "#/s/self: is the group /s again")) << msg;
  // The system beside them is read when asked for.
  EXPECT_EQ(mlip::data::open_hdf5_systems(p, "/z", {"O", "H"}).size(), 1u);
  expect_cli(p, p + "#/a/b/up: is the group /a again");
  expect_cli(p + "#/z", "");
}

TEST(Hdf5System, AGroupOfAFolderIsANamedError) {
  TempDir tmp;
  mlip::test::write_system(tmp / "folder.hdf5", 2, 4, 3, 1);
  std::vector<std::string> type_map;
  const std::string msg = error_of([&] { mlip::data::load_systems({tmp / "folder.hdf5#/sub"}, type_map); });
  EXPECT_TRUE(contains(msg, tmp / "folder.hdf5: is a folder, not an HDF5 file, so '#/sub' (a group inside an HDF5 "
                                  "file) selects nothing"))
      << msg;
  // Without '#', the folder is the DeePMD system it is.
  EXPECT_EQ(mlip::data::load_systems({tmp / "folder.hdf5"}, type_map).size(), 1u);
  expect_cli(tmp / "folder.hdf5#/sub", "folder.hdf5: is a folder, not an HDF5 file");
}

TEST(Hdf5System, StreamedFileChangedIsAnErrorNamingTheFrame) {
  TempDir tmp;
  mlip::test::write_system(tmp / "npy", 2, 4, 4, 1);
  const System npy = mlip::data::read_deepmd_system(tmp / "npy", {"O", "H"});
  const std::string p = tmp / "data.hdf5";
  { Writer w(p); w.system("/s", npy, 2); }
  const std::vector<System> systems = mlip::data::open_hdf5_systems(p, "", {"O", "H"});
  ASSERT_EQ(systems.size(), 1u);
  const System& s = systems[0];
  EXPECT_EQ(s.frame(3).coord, npy.frame(3).coord);
  // Replaced by a file of the same structure and other values.
  mlip::test::write_system(tmp / "npy2", 2, 4, 4, 7);
  { Writer w(p + ".new"); w.system("/s", mlip::data::read_deepmd_system(tmp / "npy2", {"O", "H"}), 2); }
  std::filesystem::rename(p + ".new", p);
  std::string msg = error_of([&] { s.frame(3); });
  EXPECT_TRUE(contains(msg, p + "#/s: frame 3 (row 1 of " + p + "#/s/set.001): " + p +
                                ": changed since it was opened at start (replaced by another file"))
      << msg;
  // Replaced by a FIFO: refused, never waited on; and refused at start.
  std::filesystem::remove(p);
  ASSERT_EQ(mkfifo(p.c_str(), 0600), 0);
  msg = error_of([&] { s.frame(0); });
  EXPECT_TRUE(contains(msg, p + "#/s: frame 0 (row 0 of " + p + "#/s/set.000): " + p +
                                ": changed since it was opened at start (now a FIFO"))
      << msg;
  msg = error_of([&] { mlip::data::open_hdf5_systems(p, "", {"O", "H"}); });
  EXPECT_TRUE(contains(msg, p + ": is a FIFO (named pipe), expected a regular file")) << msg;
}

#else

TEST(Hdf5System, NotBuilt) {
  GTEST_SKIP() << "this build has no HDF5 (configure with -DMLIP_HDF5=ON and libhdf5-dev)";
}

#endif

TEST(Hdf5System, AvailabilityMatchesTheBuild) {
#ifdef MLIP_HAVE_HDF5
  EXPECT_TRUE(mlip::data::hdf5_available());
#else
  EXPECT_FALSE(mlip::data::hdf5_available());
  const std::string msg = error_of([] { mlip::data::open_hdf5_systems("x.hdf5", "", {}); });
  EXPECT_TRUE(contains(msg, "reads no HDF5 files")) << msg;
#endif
}

}  // namespace
