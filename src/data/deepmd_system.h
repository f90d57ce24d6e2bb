#pragma once

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

}  // namespace mlip::data
