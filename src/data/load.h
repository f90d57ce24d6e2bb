#pragma once

#include <string>
#include <vector>

#include "data/label_keys.h"
#include "data/system.h"

namespace mlip::data {

/// Where the frames of loaded systems are: all read into memory at start, or read when they are
/// needed (docs/data.md "Frames read on demand").
enum class Loading { kInMemory, kStreamed };

/// Loads systems from paths: a DeePMD system folder (holding type.raw), a folder whose
/// sub-folders hold systems (searched recursively, sorted), or an extended XYZ file
/// (.xyz / .extxyz). Relative paths are taken relative to base_dir when it is non-empty.
///
/// A DeePMD HDF5 file (.hdf5/.h5), or one group of it (`file.hdf5#/path`), holds systems as
/// groups (data/hdf5_system.h). A LAMMPS text dump (*.dump, *.lammpstrj, dump.*; data/lammps_dump.h)
/// holds frames without labels: keys.labels_optional must be set.
/// With Loading::kStreamed only the headers (shapes, types, frame offsets) are read and checked
/// here; frames come through System::frame, which checks each for non-finite values.
///
/// type_map: in/out. When empty on entry it is filled from the data (the first system's
/// type_map.raw, extended by later names; the sorted element names for extxyz) and then applied
/// to all systems. keys: where the files keep their labels (data/label_keys.h). Throws
/// mlip::Error for a path that does not exist or holds no system.
std::vector<System> load_systems(const std::vector<std::string>& paths,
                                 std::vector<std::string>& type_map,
                                 const std::string& base_dir = "", Loading loading = Loading::kInMemory,
                                 const LabelKeys& keys = {});

/// Checks one system for values that would give a silent wrong answer: NaN/Inf in coordinates,
/// cells or labels, a missing or singular cell in a periodic direction. Throws mlip::Error
/// naming the system, the frame and the value. Called by load_systems.
void validate_system(const System& system);

}  // namespace mlip::data
