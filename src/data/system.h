#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace mlip::data {

/// Frames that share one atom count and one per-atom type order (a DeePMD "system").
/// All arrays are float64, row-major, in Å and eV, whatever the precision of the files.
struct System {
  /// Where it came from (a folder, or "file.xyz[composition]"), for messages.
  std::string name;
  /// Type names, indexed by type id (the model's type_map once remapped).
  std::vector<std::string> type_map;
  /// [natoms] type id of each atom, 0 <= id < type_map.size().
  std::vector<int> types;
  /// Periodicity of the three cell directions; all false for DeePMD `nopbc`.
  std::array<bool, 3> pbc{{true, true, true}};
  /// Number of frames.
  int64_t nframes = 0;
  /// [nframes, natoms, 3] positions, Å.
  std::vector<double> coord;
  /// [nframes, 9] cell, rows are the cell vectors, Å. Empty when the system has no cell
  /// (non-periodic in every direction).
  std::vector<double> box;
  /// [nframes] total energy, eV. Empty when not labelled.
  std::vector<double> energy;
  /// [nframes, natoms, 3] forces, eV/Å. Empty when not labelled.
  std::vector<double> force;
  /// [nframes, 9] virial, eV (XX XY XZ YX ... ). Empty when not labelled.
  std::vector<double> virial;

  int64_t natoms() const { return static_cast<int64_t>(types.size()); }
  bool has_box() const { return !box.empty(); }
  const double* frame_coord(int64_t f) const { return coord.data() + f * natoms() * 3; }
  /// nullptr when the system has no cell.
  const double* frame_box(int64_t f) const { return box.empty() ? nullptr : box.data() + f * 9; }
};

}  // namespace mlip::data
