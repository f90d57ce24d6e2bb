#pragma once

#include <string>
#include <vector>

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
/// Throws mlip::Error naming the file and what was wrong.
System read_deepmd_system(const std::string& dir, const std::vector<std::string>& type_map);

}  // namespace mlip::data
