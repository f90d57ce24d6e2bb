#pragma once

#include <string>
#include <vector>

#include "data/system.h"

namespace mlip::data {

/// Loads systems from paths: a DeePMD system folder (holding type.raw), a folder whose
/// sub-folders hold systems (searched recursively, sorted), or an extended XYZ file
/// (.xyz / .extxyz). Relative paths are taken relative to base_dir when it is non-empty.
///
/// type_map: in/out. When empty on entry it is filled from the data (the first system's
/// type_map.raw, extended by later names; the sorted element names for extxyz) and then applied
/// to all systems. Throws mlip::Error for a path that does not exist or holds no system.
std::vector<System> load_systems(const std::vector<std::string>& paths,
                                 std::vector<std::string>& type_map,
                                 const std::string& base_dir = "");

/// Checks one system for values that would give a silent wrong answer: NaN/Inf in coordinates,
/// cells or labels, a missing or singular cell in a periodic direction. Throws mlip::Error
/// naming the system, the frame and the value. Called by load_systems.
void validate_system(const System& system);

}  // namespace mlip::data
