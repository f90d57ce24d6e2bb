#include "data/deepmd_system.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/file_identity.h"
#include "data/npy.h"
#include "error.h"

namespace fs = std::filesystem;

namespace mlip::data {

namespace {

/// Without any type names, ids name types "type_<id>"; larger ids are taken as a mistake.
constexpr int kMaxUnnamedTypes = 4096;

std::string join_names(const std::vector<std::string>& names) {
  std::string s = "[";
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s + "]";
}

std::vector<std::string> read_tokens(const std::string& path) {
  regular_file_identity(path);  // a FIFO would block the read below
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open file (" + std::strerror(errno) + ")");
  std::vector<std::string> tokens;
  std::string t;
  while (in >> t) tokens.push_back(t);
  return tokens;
}

std::vector<int> read_type_raw(const std::string& path) {
  std::vector<std::string> tokens = read_tokens(path);
  if (tokens.empty()) {
    throw Error(path + ": expected one integer type id per atom, got an empty file");
  }
  std::vector<int> types;
  types.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& tok = tokens[i];
    bool ok = !tok.empty() && tok.size() <= 9 &&
              tok.find_first_not_of("0123456789") == std::string::npos;
    if (!ok) {
      throw Error(path + ": expected a non-negative integer type id for atom " +
                  std::to_string(i) + ", got '" + tok + "'");
    }
    types.push_back(std::stoi(tok));
  }
  return types;
}

/// One array of one set (coord.npy, ...), opened and checked against the expected per-frame
/// size. nframes < 0: not yet known (coord.npy), taken from the array.
NpyFile open_frames(const std::string& path, int64_t& nframes, int64_t per_frame, const std::string& what) {
  NpyFile a = open_npy(path);
  check_frame_shape(path, a.shape, nframes, per_frame, what);
  return a;
}

}  // namespace

void check_frame_shape(const std::string& path, const std::vector<int64_t>& shape, int64_t& nframes,
                       int64_t per_frame, const std::string& what) {
  auto fail = [&]() {
    const std::string nf_text = nframes < 0 ? "nframes" : std::to_string(nframes);
    const std::string nf_note = nframes < 0 ? "nframes" : "nframes " + std::to_string(nframes) + " from coord.npy";
    std::string expected = per_frame == 1 ? "[" + nf_text + "] (" + nf_note + ")"
                                          : "[" + nf_text + ", " + std::to_string(per_frame) + "] (" + nf_note +
                                                " x " + what + ")";
    throw Error(path + ": expected shape " + expected + ", got " + shape_string(shape));
  };
  int64_t size = 1;
  for (int64_t d : shape) size *= d;
  if (shape.empty()) {
    // A 0-d array: a single value, acceptable only for one frame of one value.
    if (per_frame == 1 && nframes <= 1) {
      nframes = 1;
      return;
    }
    fail();
  }
  int64_t nf = shape[0];
  if (shape.size() == 1 && per_frame != 1) {
    // A single frame stored flat.
    if (shape[0] != per_frame || nframes > 1) fail();
    nf = 1;
  }
  if (nframes >= 0 && nf != nframes) fail();
  if (size != nf * per_frame) fail();
  if (nframes < 0 && nf == 0) {
    throw Error(path + ": expected at least one frame, got shape " + shape_string(shape));
  }
  nframes = nf;
}

namespace {

/// Frames [first, first + count) of an array opened by open_frames, per_frame values each.
std::vector<double> read_frames(const NpyFile& a, int64_t first, int64_t count, int64_t per_frame) {
  const int64_t rows_per_frame = per_frame / a.row_size();
  return read_npy_rows(a, first * rows_per_frame, count * rows_per_frame);
}

/// The arrays of one set.* folder.
struct SetFiles {
  int64_t nframes = 0;
  std::string dir;  ///< the set.* folder, for messages
  NpyFile coord, box, energy, force, virial;
  bool has_box = false;
};

/// Reads the frames of a DeePMD npy system: each frame from the set that holds it.
class NpyFrameReader : public FrameReader {
 public:
  NpyFrameReader(std::string dir, std::vector<SetFiles> sets, int64_t natoms, bool energy, bool force, bool virial)
      : dir_(std::move(dir)), sets_(std::move(sets)), natoms_(natoms), energy_(energy), force_(force),
        virial_(virial) {}

  Frame read(int64_t frame) const override {
    return read_naming_frame(dir_, frame, where(frame), [&] {
      const auto [s, f] = locate(frame);
      if (s == sets_.size()) throw Error("beyond the system's " + std::to_string(total()) + " frames");
      const SetFiles& set = sets_[s];
      Frame out;
      out.coord = read_frames(set.coord, f, 1, 3 * natoms_);
      if (set.has_box) out.box = read_frames(set.box, f, 1, 9);
      if (energy_) out.energy = read_frames(set.energy, f, 1, 1);
      if (force_) out.force = read_frames(set.force, f, 1, 3 * natoms_);
      if (virial_) out.virial = read_frames(set.virial, f, 1, 9);
      return out;
    });
  }

  std::string where(int64_t frame) const override {
    const auto [s, f] = locate(frame);
    if (s == sets_.size()) return "";
    return "row " + std::to_string(f) + " of " + sets_[s].dir;
  }

 private:
  /// The set holding `frame` (sets_.size() when none does) and the frame's row in it.
  std::pair<size_t, int64_t> locate(int64_t frame) const {
    size_t s = 0;
    int64_t f = frame;
    while (s < sets_.size() && f >= sets_[s].nframes) f -= sets_[s++].nframes;
    return {s, f};
  }
  int64_t total() const {
    int64_t n = 0;
    for (const SetFiles& set : sets_) n += set.nframes;
    return n;
  }

  std::string dir_;
  std::vector<SetFiles> sets_;
  int64_t natoms_;
  bool energy_, force_, virial_;
};

}  // namespace

void assign_types(System& sys, const std::vector<int>& raw_types, const std::vector<std::string>* names_in_file,
                  const std::vector<std::string>& type_map, const std::string& type_path, const std::string& map_path) {
  const bool has_map_file = names_in_file != nullptr;
  const std::vector<std::string> file_names = has_map_file ? *names_in_file : std::vector<std::string>{};
  const int max_id = *std::max_element(raw_types.begin(), raw_types.end());
  if (has_map_file && max_id >= static_cast<int>(file_names.size())) {
    throw Error(type_path + ": type id " + std::to_string(max_id) + " is out of range for " + map_path +
                " which names " + std::to_string(file_names.size()) + " types " + join_names(file_names));
  }
  if (type_map.empty()) {
    if (has_map_file) {
      sys.type_map = file_names;
    } else {
      if (max_id >= kMaxUnnamedTypes) {
        throw Error(type_path + ": type id " + std::to_string(max_id) + " is implausibly large "
                    "(expected < " + std::to_string(kMaxUnnamedTypes) +
                    "); give the type names in type_map.raw or a type_map");
      }
      for (int t = 0; t <= max_id; ++t) sys.type_map.push_back("type_" + std::to_string(t));
    }
    sys.types = raw_types;
  } else {
    sys.type_map = type_map;
    sys.types.resize(raw_types.size());
    if (has_map_file) {
      // Remap the names of type_map.raw onto the model's type_map; only names in use matter.
      std::vector<int> remap(file_names.size(), -1);
      for (size_t i = 0; i < file_names.size(); ++i) {
        auto it = std::find(type_map.begin(), type_map.end(), file_names[i]);
        if (it != type_map.end()) remap[i] = static_cast<int>(it - type_map.begin());
      }
      for (size_t a = 0; a < raw_types.size(); ++a) {
        int id = remap[raw_types[a]];
        if (id < 0) {
          throw Error(map_path + ": element '" + file_names[raw_types[a]] +
                      "' (used by atom " + std::to_string(a) +
                      " in type.raw) is not in the model's type_map " + join_names(type_map));
        }
        sys.types[a] = id;
      }
    } else {
      if (max_id >= static_cast<int>(type_map.size())) {
        throw Error(type_path + ": type id " + std::to_string(max_id) +
                    " is out of range for the model's type_map " + join_names(type_map) +
                    " (no type_map.raw, so ids index the model's type_map)");
      }
      sys.types = raw_types;
    }
  }

}

bool label_in_set(const std::string& path, const std::string& label, bool here, bool first, bool& has,
                  const std::string& first_set, const std::string& container) {
  if (first) {
    has = here;
  } else if (here != has) {
    throw Error(path + (here ? ": found, but " + first_set + " has no " + label
                             : ": not found, but " + first_set + " has " + label) +
                " (a label must be in every set.* " + container + " or in none)");
  }
  return here;
}

std::array<std::string, 3> deepmd_label_files(const LabelKeys& keys, const std::string& where) {
  if (!keys.stress.empty())
    throw Error(where + ": stress_key '" + keys.stress + "': DeePMD systems keep virials (virial.npy, eV), not "
                "stresses; use virial_key for a virial under another name");
  return {(keys.energy.empty() ? "energy" : keys.energy) + ".npy", (keys.forces.empty() ? "force" : keys.forces) + ".npy",
          (keys.virial.empty() ? "virial" : keys.virial) + ".npy"};
}

void check_named_labels(const LabelKeys& keys, const std::string& first_set, bool energy, bool forces, bool virial) {
  auto missing = [&](const std::string& key, const std::string& name) {
    throw Error(first_set + ": " + key + " '" + name + "': no " + name + ".npy here (the label named by " + key +
                " must be in every set)");
  };
  if (!keys.energy.empty() && !energy) missing("energy_key", keys.energy);
  if (!keys.forces.empty() && !forces) missing("forces_key", keys.forces);
  if (!keys.virial.empty() && !virial) missing("virial_key", keys.virial);
}

System open_deepmd_system(const std::string& dir, const std::vector<std::string>& type_map, const LabelKeys& keys) {
  const std::array<std::string, 3> names = deepmd_label_files(keys, dir);
  if (!fs::is_directory(dir)) {
    throw Error(dir + ": not a folder (expected a DeePMD system folder holding type.raw)");
  }
  System sys;
  sys.name = dir;

  const std::string type_path = dir + "/type.raw";
  if (!fs::exists(type_path)) {
    throw Error(type_path + ": not found (a DeePMD system folder needs type.raw)");
  }
  std::vector<int> raw_types = read_type_raw(type_path);
  const int64_t natoms = static_cast<int64_t>(raw_types.size());

  const std::string map_path = dir + "/type_map.raw";
  const bool has_map_file = fs::exists(map_path);
  std::vector<std::string> file_names;
  if (has_map_file) file_names = read_tokens(map_path);

  assign_types(sys, raw_types, has_map_file ? &file_names : nullptr, type_map, type_path, map_path);

  const bool nopbc = fs::exists(dir + "/nopbc");
  if (nopbc) sys.pbc = {false, false, false};

  std::vector<std::string> sets;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.rfind("set.", 0) == 0) sets.push_back(name);
  }
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) {
    throw Error(dir + ": no set.* folder (expected set.000/coord.npy etc. next to type.raw)");
  }

  const std::string natoms_note = "natoms " + std::to_string(natoms) + " from type.raw";
  bool first = true;
  bool has_energy = false, has_force = false, has_virial = false;
  std::string first_set;
  std::vector<SetFiles> files;
  for (const std::string& set : sets) {
    const std::string set_dir = dir + "/" + set;
    const std::string coord_path = set_dir + "/coord.npy";
    if (!fs::exists(coord_path)) {
      throw Error(coord_path + ": not found (every set.* folder needs coord.npy)");
    }
    SetFiles sf;
    sf.dir = set_dir;
    int64_t nf = -1;
    sf.coord = open_frames(coord_path, nf, 3 * natoms, "3*natoms, " + natoms_note);
    if (!nopbc) {
      const std::string box_path = set_dir + "/box.npy";
      if (!fs::exists(box_path)) {
        throw Error(box_path + ": not found (box.npy is required unless the system folder has an "
                               "empty file 'nopbc')");
      }
      sf.box = open_frames(box_path, nf, 9, "9, rows are the cell vectors");
      sf.has_box = true;
    }

    auto label = [&](const std::string& file, bool& has, int64_t per_frame, const std::string& what,
                     NpyFile& out) {
      const std::string path = set_dir + "/" + file;
      if (label_in_set(path, file, fs::exists(path), first, has, first_set, "folder"))
        out = open_frames(path, nf, per_frame, what);
    };
    label(names[0], has_energy, 1, "", sf.energy);
    label(names[1], has_force, 3 * natoms, "3*natoms, " + natoms_note, sf.force);
    label(names[2], has_virial, 9, "9", sf.virial);
    if (first) check_named_labels(keys, set_dir, has_energy, has_force, has_virial);
    sf.nframes = nf;
    sys.nframes += nf;
    files.push_back(std::move(sf));
    if (first) first_set = set;
    first = false;
  }
  sys.has_cell = !nopbc;
  sys.has_energy = has_energy, sys.has_force = has_force, sys.has_virial = has_virial;
  sys.reader = std::make_shared<NpyFrameReader>(dir, std::move(files), natoms, has_energy, has_force, has_virial);
  return sys;
}

System read_deepmd_system(const std::string& dir, const std::vector<std::string>& type_map, const LabelKeys& keys) {
  System sys = open_deepmd_system(dir, type_map, keys);
  sys.load_all();
  return sys;
}

}  // namespace mlip::data
