#pragma once

#include <string>
#include <vector>

#include "data/label_keys.h"
#include "data/system.h"

namespace mlip::data {

/// Whether this build reads HDF5 files (CMake option MLIP_HDF5; Debian: libhdf5-dev).
bool hdf5_available();

/// Opens the DeePMD systems of an HDF5 file as dpdata writes them (docs/data.md "HDF5
/// systems"): a system is a group holding `type.raw` (an integer dataset [N], or text of
/// integers), optionally `type_map.raw` (strings) and `nopbc`, and groups `set.000`, ... with
/// the datasets `coord.npy` [F, 3N], `box.npy` [F, 9] (unless nopbc), `energy.npy` [F],
/// `force.npy` [F, 3N] and `virial.npy` [F, 9] (each label optional), float32 or float64.
///
/// group: "" or "/" opens the root when it is a system, else every group under it that is one
/// (recursively, in name order); "/a/b" opens that group (a system, or groups holding systems).
/// Only the structure, types, shapes and dtypes are read here; frames are read when asked for
/// (System::frame), each with its own open and close of the file. type_map as in
/// read_deepmd_system. keys: the label datasets' names (data/label_keys.h: `<energy>.npy`, ...).
/// Throws mlip::Error naming the file, the dataset and what was wrong.
std::vector<System> open_hdf5_systems(const std::string& file, const std::string& group,
                                      const std::vector<std::string>& type_map, const LabelKeys& keys = {});

}  // namespace mlip::data
