#pragma once

#include <array>
#include <string>
#include <vector>

#include "data/label_keys.h"
#include "data/system.h"

namespace mlip::data {

/// Reads one DeePMD npy system folder: type.raw, optional type_map.raw, optional `nopbc`,
/// set.*/ with coord.npy [nf, 3N], box.npy [nf, 9] (unless nopbc), energy.npy [nf],
/// force.npy [nf, 3N], virial.npy [nf, 9] (each label optional). Several set.* folders are
/// concatenated in name order.
///
/// type_map: the model's type names. When non-empty, type_map.raw names are remapped onto it
/// (a name used by type.raw but missing from it is an error; unused names are ignored);
/// without type_map.raw the ids of type.raw are used as indices into it. When empty, the
/// system's own type_map.raw (or "type_0", "type_1", ...) is used.
/// keys: the labels' file names (data/label_keys.h: `<energy>.npy`, ...; a label named there must
/// be in the sets). Throws mlip::Error naming the file and what was wrong.
System read_deepmd_system(const std::string& dir, const std::vector<std::string>& type_map,
                          const LabelKeys& keys = {});

/// As read_deepmd_system, but reads only type.raw, type_map.raw and the .npy headers (every check
/// of the shapes is made here, with the same messages); the frames are read when asked for
/// (System::frame, streamed).
System open_deepmd_system(const std::string& dir, const std::vector<std::string>& type_map,
                          const LabelKeys& keys = {});

/// The energy, force and virial file names of a DeePMD set under `keys` ({"energy.npy",
/// "force.npy", "virial.npy"} by default); a stress_key is an error naming `where`.
std::array<std::string, 3> deepmd_label_files(const LabelKeys& keys, const std::string& where);

/// A label named by a key (energy_key, forces_key, virial_key) that the first set lacks is an
/// error naming that set (first_set) and the key.
void check_named_labels(const LabelKeys& keys, const std::string& first_set, bool energy, bool forces, bool virial);

/// Sets sys.type_map and sys.types from the raw type ids of type.raw and, when the system names
/// them, the names of type_map.raw (names_in_file; nullptr when absent), onto the model's
/// type_map as read_deepmd_system describes. type_path and map_path name the sources in messages.
void assign_types(System& sys, const std::vector<int>& raw_types, const std::vector<std::string>* names_in_file,
                  const std::vector<std::string>& type_map, const std::string& type_path, const std::string& map_path);

/// Checks the shape of a per-frame array (coord [nframes, 3N], box [nframes, 9], energy [nframes],
/// ...) as DeePMD-kit accepts it: [nframes, per_frame] or more dimensions with that product, a
/// single frame stored flat, a 0-d energy. nframes < 0: not yet known, set from the array.
/// Throws mlip::Error("<path>: expected shape ..., got ...").
void check_frame_shape(const std::string& path, const std::vector<int64_t>& shape, int64_t& nframes,
                       int64_t per_frame, const std::string& what);

/// Whether an optional label (energy.npy, ...) is in the set at `path`: the first set decides
/// (`first`; `has` is set from it), every later set must agree, or mlip::Error names `path`, the
/// label and `first_set` ("a label must be in every set.* <container> or in none").
bool label_in_set(const std::string& path, const std::string& label, bool here, bool first, bool& has,
                  const std::string& first_set, const std::string& container);

}  // namespace mlip::data
