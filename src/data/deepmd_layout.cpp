#include "data/deepmd_layout.h"

#include <algorithm>

#include "data/npy.h"
#include "error.h"

namespace mlip::data {

namespace {

/// Without any type names, ids name types "type_<id>"; larger ids are taken as a mistake.
constexpr int kMaxUnnamedTypes = 4096;

std::string join_names(const std::vector<std::string>& names) {
  std::string s = "[";
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s + "]";
}

/// The energy, force, virial and charge file names of a DeePMD set under `keys` ({"energy.npy",
/// "force.npy", "virial.npy", "charge.npy"} by default); a stress_key is an error naming `where`.
std::array<std::string, 4> deepmd_label_files(const LabelKeys& keys, const std::string& where) {
  if (!keys.stress.empty())
    throw Error(where + ": stress_key '" + keys.stress + "': DeePMD systems keep virials (virial.npy, eV), not "
                "stresses; use virial_key for a virial under another name");
  return {(keys.energy.empty() ? "energy" : keys.energy) + ".npy", (keys.forces.empty() ? "force" : keys.forces) + ".npy",
          (keys.virial.empty() ? "virial" : keys.virial) + ".npy", (keys.charges.empty() ? "charge" : keys.charges) + ".npy"};
}

/// A label named by a key (energy_key, forces_key, virial_key, charges_key) that the first set
/// lacks is an error naming that set (first_set) and the key.
void check_named_labels(const LabelKeys& keys, const std::string& first_set, bool energy, bool forces, bool virial,
                        bool charges) {
  auto missing = [&](const std::string& key, const std::string& name) {
    throw Error(first_set + ": " + key + " '" + name + "': no " + name + ".npy here (the label named by " + key +
                " must be in every set)");
  };
  if (!keys.energy.empty() && !energy) missing("energy_key", keys.energy);
  if (!keys.forces.empty() && !forces) missing("forces_key", keys.forces);
  if (!keys.virial.empty() && !virial) missing("virial_key", keys.virial);
  if (!keys.charges.empty() && !charges) missing("charges_key", keys.charges);
}

/// Sets sys.type_map and sys.types from the raw type ids of type.raw and, when the system names
/// them, the names of type_map.raw (names_in_file; nullptr when absent), onto the model's
/// type_map as read_deepmd_system describes. type_path and map_path name the sources in messages.
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

/// Checks the shape of a per-frame array (coord [nframes, 3N], box [nframes, 9], energy [nframes],
/// ...) as DeePMD-kit accepts it: [nframes, per_frame] or more dimensions with that product, a
/// single frame stored flat, a 0-d energy. nframes < 0: not yet known, set from the array.
/// Throws mlip::Error("<path>: expected shape ..., got ...").
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

/// Whether an optional label (energy.npy, ...) is in the set at `path`: the first set decides
/// (`first`; `has` is set from it), every later set must agree, or mlip::Error names `path`, the
/// label and `first_set` ("a label must be in every set.* <container> or in none").
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

/// Reads type.raw and, when present, type_map.raw of the system and sets sys.type_map and
/// sys.types from them (assign_types); returns the number of atoms.
int64_t read_types(const DeepmdStorage& storage, const std::vector<std::string>& type_map, System& sys) {
  const std::string type_path = storage.join(storage.root(), "type.raw");
  const std::vector<int> raw_types = storage.read_type_ids(type_path);
  const std::string map_path = storage.join(storage.root(), "type_map.raw");
  const bool has_map_file = storage.exists(map_path);
  std::vector<std::string> file_names;
  if (has_map_file) file_names = storage.read_type_names(map_path);
  assign_types(sys, raw_types, has_map_file ? &file_names : nullptr, type_map, storage.where(type_path),
               storage.where(map_path));
  return static_cast<int64_t>(raw_types.size());
}

/// Opens the arrays of set number `set` (at set_path) and checks their shapes; the first set
/// decides which labels the system has (layout.has_*), and a label named by `keys` must be in
/// it. first_set: the first set's name, for messages. Returns the set's number of frames.
int64_t open_set(DeepmdStorage& storage, DeepmdLayout& layout, size_t set, const std::string& set_path,
                 const std::string& first_set, const LabelKeys& keys) {
  const bool first = set == 0;
  const std::string natoms_note = "natoms " + std::to_string(layout.natoms) + " from type.raw";
  int64_t nframes = -1;
  auto open = [&](SetArray which, const std::string& what) {
    const std::string path = storage.join(set_path, layout.array_name(which));
    check_frame_shape(storage.where(path), storage.open_array(set, which, path), nframes,
                      layout.values_per_frame(which), what);
  };
  const std::string coord_path = storage.join(set_path, "coord.npy");
  if (!storage.exists(coord_path))
    throw Error(storage.where(coord_path) + ": not found (every set.* " + storage.container() + " needs coord.npy)");
  open(SetArray::coord, "3*natoms, " + natoms_note);
  if (layout.has_box) {
    const std::string box_path = storage.join(set_path, "box.npy");
    if (!storage.exists(box_path))
      throw Error(storage.where(box_path) + ": not found (box.npy is required unless " + storage.without_box() + ")");
    open(SetArray::box, "9, rows are the cell vectors");
  }
  auto label = [&](SetArray which, bool& has, const std::string& what) {
    const std::string name = layout.array_name(which);
    const std::string path = storage.join(set_path, name);
    if (label_in_set(storage.where(path), name, storage.exists(path), first, has, first_set, storage.container()))
      open(which, what);
  };
  label(SetArray::energy, layout.has_energy, "");
  label(SetArray::force, layout.has_force, "3*natoms, " + natoms_note);
  label(SetArray::virial, layout.has_virial, "9");
  label(SetArray::charge, layout.has_charge, "natoms, " + natoms_note);
  if (first)
    check_named_labels(keys, storage.where(set_path), layout.has_energy, layout.has_force, layout.has_virial,
                       layout.has_charge);
  return nframes;
}

}  // namespace

std::string DeepmdLayout::array_name(SetArray which) const {
  switch (which) {
    case SetArray::coord: return "coord.npy";
    case SetArray::box: return "box.npy";
    case SetArray::energy: return label_files[0];
    case SetArray::force: return label_files[1];
    case SetArray::virial: return label_files[2];
    case SetArray::charge: return label_files[3];
  }
  return "";
}

int64_t DeepmdLayout::values_per_frame(SetArray which) const {
  switch (which) {
    case SetArray::coord:
    case SetArray::force: return 3 * natoms;
    case SetArray::box:
    case SetArray::virial: return 9;
    case SetArray::energy: return 1;
    case SetArray::charge: return natoms;
  }
  return 0;
}

int64_t DeepmdLayout::total_frames() const {
  int64_t n = 0;
  for (int64_t f : set_frames) n += f;
  return n;
}

std::pair<size_t, int64_t> DeepmdLayout::locate(int64_t frame) const {
  size_t s = 0;
  int64_t f = frame;
  while (s < set_frames.size() && f >= set_frames[s]) f -= set_frames[s++];
  return {s, f};
}

Frame DeepmdLayout::read_frame(const std::function<std::vector<double>(SetArray, int64_t)>& read) const {
  Frame out;
  out.coord = read(SetArray::coord, values_per_frame(SetArray::coord));
  if (has_box) out.box = read(SetArray::box, values_per_frame(SetArray::box));
  if (has_energy) out.energy = read(SetArray::energy, values_per_frame(SetArray::energy));
  if (has_force) out.force = read(SetArray::force, values_per_frame(SetArray::force));
  if (has_virial) out.virial = read(SetArray::virial, values_per_frame(SetArray::virial));
  if (has_charge) out.charge = read(SetArray::charge, values_per_frame(SetArray::charge));
  return out;
}

DeepmdLayout open_deepmd_layout(DeepmdStorage& storage, const std::vector<std::string>& type_map,
                                const LabelKeys& keys, System& sys) {
  DeepmdLayout layout;
  const std::string root = storage.root();
  layout.label_files = deepmd_label_files(keys, storage.where(root));
  storage.check_root();
  sys.name = storage.where(root);
  layout.natoms = read_types(storage, type_map, sys);
  layout.has_box = !storage.exists(storage.join(root, "nopbc"));
  if (!layout.has_box) sys.pbc = {false, false, false};

  const std::vector<std::string> sets = storage.set_names();
  if (sets.empty()) {
    throw Error(sys.name + ": no set.* " + storage.container() +
                " (expected set.000/coord.npy etc. next to type.raw)");
  }
  for (size_t s = 0; s < sets.size(); ++s) {
    const std::string set_path = storage.join(root, sets[s]);
    const int64_t nframes = open_set(storage, layout, s, set_path, sets[0], keys);
    layout.set_paths.push_back(set_path);
    layout.set_frames.push_back(nframes);
    sys.nframes += nframes;
  }
  sys.has_cell = layout.has_box;
  sys.has_energy = layout.has_energy, sys.has_force = layout.has_force, sys.has_virial = layout.has_virial;
  sys.has_charge = layout.has_charge;
  return layout;
}

}  // namespace mlip::data
