#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "data/label_keys.h"
#include "data/system.h"

namespace mlip::data {

/// The arrays of one set.* of a DeePMD system (docs/data.md), in the order they are read:
/// coord [nframes, 3N] Å, box [nframes, 9] Å (rows are the cell vectors; none with nopbc), and
/// the optional labels energy [nframes] eV, force [nframes, 3N] eV/Å, virial [nframes, 9] eV,
/// charge [nframes, N] e.
enum class SetArray { coord = 0, box, energy, force, virial, charge };

/// Number of SetArray values.
constexpr size_t kSetArrays = 6;

/// Where a DeePMD system is stored, as the walk over its layout (open_deepmd_layout) sees it: a
/// folder holding type.raw and set.*/ folders of .npy files (deepmd_system.cpp), or an HDF5
/// group holding the same as datasets and groups (hdf5_system.cpp). Paths are the storage's own
/// (a file path; a path inside the HDF5 file).
class DeepmdStorage {
 public:
  virtual ~DeepmdStorage() = default;
  /// The system's folder or group.
  virtual std::string root() const = 0;
  /// The path of `name` inside the folder or group `parent`.
  virtual std::string join(const std::string& parent, const std::string& name) const = 0;
  /// How messages name `path`: the path itself, or "file.hdf5#/group/name".
  virtual std::string where(const std::string& path) const = 0;
  /// Whether there is a file or dataset (or group) at `path`.
  virtual bool exists(const std::string& path) const = 0;
  /// The names of the set.* folders or groups in root(), sorted.
  virtual std::vector<std::string> set_names() const = 0;
  /// The integer type ids of type.raw at `path`, one per atom (throws mlip::Error when invalid).
  virtual std::vector<int> read_type_ids(const std::string& path) const = 0;
  /// The type names of type_map.raw at `path` (whitespace-separated names).
  virtual std::vector<std::string> read_type_names(const std::string& path) const = 0;
  /// Opens array `which` of the set numbered `set` (0-based, in set_names() order), at `path`,
  /// and keeps it for reading frames later; returns its shape. Throws mlip::Error for an array
  /// that cannot be read (its shape is checked by the caller).
  virtual std::vector<int64_t> open_array(size_t set, SetArray which, const std::string& path) = 0;
  /// Checks made before anything is read (the folder exists and holds type.raw); none by default.
  virtual void check_root() const {}
  /// What a set is, in messages: "folder" or "group".
  virtual std::string container() const = 0;
  /// When box.npy may be missing, in messages: "the system folder has an empty file 'nopbc'".
  virtual std::string without_box() const = 0;
};

/// A DeePMD system's layout as open_deepmd_layout found it.
struct DeepmdLayout {
  int64_t natoms = 0;
  bool has_box = true;  ///< false when the system has `nopbc`
  bool has_energy = false, has_force = false, has_virial = false, has_charge = false;
  /// The energy, force, virial and charge file names (deepmd_label_files).
  std::array<std::string, 4> label_files;
  /// Each set's folder or group, as a path of the storage.
  std::vector<std::string> set_paths;
  /// Frames in each set.
  std::vector<int64_t> set_frames;

  /// The file (or dataset) name of an array in a set: "coord.npy", "box.npy" or a label file.
  std::string array_name(SetArray which) const;
  /// Values per frame of an array: 3 * natoms for coord and force, 9 for box and virial, 1 for
  /// energy, natoms for charge.
  int64_t values_per_frame(SetArray which) const;
  /// Frames in all sets.
  int64_t total_frames() const;
  /// The set holding `frame` (set_paths.size() when none does) and the frame's row in it.
  std::pair<size_t, int64_t> locate(int64_t frame) const;
  /// One frame: coord, and box and the labels the system has, each array's values of that frame
  /// (values_per_frame of them, float64) from read(which, values_per_frame(which)).
  Frame read_frame(const std::function<std::vector<double>(SetArray, int64_t)>& read) const;
};

/// Walks the layout of the DeePMD system in `storage` (docs/data.md): type.raw, optional
/// type_map.raw and nopbc, and every set.* with coord.npy, box.npy (unless nopbc) and the
/// optional labels named by `keys` (data/label_keys.h), opening each array (DeepmdStorage::
/// open_array) and checking its shape. Sets sys.name, type_map, types (as read_deepmd_system
/// describes for type_map), pbc, nframes, has_cell, has_energy, has_force, has_virial and has_charge; the
/// reader is the caller's. Throws mlip::Error naming the file or dataset and what was wrong.
DeepmdLayout open_deepmd_layout(DeepmdStorage& storage, const std::vector<std::string>& type_map,
                                const LabelKeys& keys, System& sys);

}  // namespace mlip::data
