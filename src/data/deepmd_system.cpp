#include "data/deepmd_system.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

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

/// One label array of one set, checked against the expected per-frame size.
/// nframes < 0: not yet known (coord.npy), taken from the array.
std::vector<double> read_frames(const std::string& path, int64_t& nframes, int64_t per_frame,
                                const std::string& what) {
  NpyArray a = read_npy(path);
  auto fail = [&]() {
    const std::string nf_text = nframes < 0 ? "nframes" : std::to_string(nframes);
    const std::string nf_note =
        nframes < 0 ? "nframes" : "nframes " + std::to_string(nframes) + " from coord.npy";
    std::string expected = per_frame == 1
                               ? "[" + nf_text + "] (" + nf_note + ")"
                               : "[" + nf_text + ", " + std::to_string(per_frame) + "] (" +
                                     nf_note + " x " + what + ")";
    throw Error(path + ": expected shape " + expected + ", got " + shape_string(a.shape));
  };
  if (a.shape.empty()) {
    // A 0-d array: a single value, acceptable only for one frame of one value.
    if (per_frame == 1 && nframes <= 1) {
      nframes = 1;
      return a.values;
    }
    fail();
  }
  int64_t nf = a.shape[0];
  if (a.shape.size() == 1 && per_frame != 1) {
    // A single frame stored flat.
    if (a.shape[0] != per_frame || nframes > 1) fail();
    nf = 1;
  }
  if (nframes >= 0 && nf != nframes) fail();
  if (a.size() != nf * per_frame) fail();
  if (nframes < 0 && nf == 0) {
    throw Error(path + ": expected at least one frame, got shape " + shape_string(a.shape));
  }
  nframes = nf;
  return std::move(a.values);
}

}  // namespace

System read_deepmd_system(const std::string& dir, const std::vector<std::string>& type_map) {
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
  const int max_id = *std::max_element(raw_types.begin(), raw_types.end());

  const std::string map_path = dir + "/type_map.raw";
  const bool has_map_file = fs::exists(map_path);
  std::vector<std::string> file_names;
  if (has_map_file) {
    file_names = read_tokens(map_path);
    if (max_id >= static_cast<int>(file_names.size())) {
      throw Error(type_path + ": type id " + std::to_string(max_id) + " is out of range for " +
                  map_path + " which names " + std::to_string(file_names.size()) + " types " +
                  join_names(file_names));
    }
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
  for (const std::string& set : sets) {
    const std::string set_dir = dir + "/" + set;
    const std::string coord_path = set_dir + "/coord.npy";
    if (!fs::exists(coord_path)) {
      throw Error(coord_path + ": not found (every set.* folder needs coord.npy)");
    }
    int64_t nf = -1;
    std::vector<double> coord =
        read_frames(coord_path, nf, 3 * natoms, "3*natoms, " + natoms_note);

    std::vector<double> box;
    if (!nopbc) {
      const std::string box_path = set_dir + "/box.npy";
      if (!fs::exists(box_path)) {
        throw Error(box_path + ": not found (box.npy is required unless the system folder has an "
                               "empty file 'nopbc')");
      }
      box = read_frames(box_path, nf, 9, "9, rows are the cell vectors");
    }

    auto label = [&](const std::string& file, bool& has, int64_t per_frame,
                     const std::string& what, std::vector<double>& out) {
      const std::string path = set_dir + "/" + file;
      const bool here = fs::exists(path);
      if (first) {
        has = here;
      } else if (here != has) {
        throw Error(path + (here ? ": found, but " + first_set + " has no " + file
                                 : ": not found, but " + first_set + " has " + file) +
                    " (a label must be in every set.* folder or in none)");
      }
      if (here) {
        std::vector<double> v = read_frames(path, nf, per_frame, what);
        out.insert(out.end(), v.begin(), v.end());
      }
    };

    sys.coord.insert(sys.coord.end(), coord.begin(), coord.end());
    sys.box.insert(sys.box.end(), box.begin(), box.end());
    label("energy.npy", has_energy, 1, "", sys.energy);
    label("force.npy", has_force, 3 * natoms, "3*natoms, " + natoms_note, sys.force);
    label("virial.npy", has_virial, 9, "9", sys.virial);
    sys.nframes += nf;
    if (first) first_set = set;
    first = false;
  }
  return sys;
}

}  // namespace mlip::data
