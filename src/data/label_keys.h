// Where a data file keeps its labels (docs/data.md "Label keys"), for data written by other
// codes: MACE's users keep them as REF_energy, REF_forces, REF_stress.
#pragma once

#include <string>

namespace mlip::data {

/// The names under which a file holds its labels; an empty name means the default. Set per data
/// section (training_data.energy_key, ...) and by `mlip test` / `mlip neighbor-stat` options.
struct LabelKeys {
  /// Energy, eV. Extended XYZ: a key of the comment line (default `energy`, else `free_energy`);
  /// DeePMD npy / HDF5 systems: the dataset `<name>.npy` of each set (default `energy`).
  std::string energy;
  /// Forces, eV/Å. Extended XYZ: a column of Properties, R:3 (default `forces`, else `force`);
  /// DeePMD systems: `<name>.npy` (default `force`).
  std::string forces;
  /// Virial, eV, 9 numbers row-major, W = -dE/dε. Extended XYZ: a comment key (default
  /// `virial`); DeePMD systems: `<name>.npy` (default `virial`).
  std::string virial;
  /// Stress, eV/Å³, ASE's convention (σ = (1/V) dE/dε, positive when the cell pulls inwards), 9
  /// numbers or 6 in Voigt order (xx yy zz yz xz xy); read as the virial W = -σ·V. Extended XYZ
  /// only: a comment key (default `stress`), used where the frame has no virial.
  std::string stress;
  /// Per-atom charges, e (docs/long_range.md "Charge labels"): Extended XYZ: a column of
  /// Properties, R:1 (default `REF_charges`, else `charges`); DeePMD npy / HDF5 systems:
  /// `<name>.npy` of each set, [nframes, natoms] (default `charge`). Optional; named, every frame
  /// must have it.
  std::string charges;
  /// Per-frame weight in the loss, >= 0 (MACE's `config_weight`). Extended XYZ only: a comment
  /// key (default `config_weight`); a frame without it has weight 1.
  std::string weight;
  /// Extended XYZ: frames without an energy or forces are read without them (Frame::energy and
  /// Frame::force empty; System::has_energy / has_force false when any frame lacks them), for
  /// commands that only predict (`mlip model-devi`). False: training data, labels required.
  bool labels_optional = false;

  /// The comment-line or dataset name of each label.
  std::string energy_name() const { return energy.empty() ? "energy" : energy; }
  std::string virial_name() const { return virial.empty() ? "virial" : virial; }
  std::string stress_name() const { return stress.empty() ? "stress" : stress; }
  std::string weight_name() const { return weight.empty() ? "config_weight" : weight; }
  bool defaults() const {
    return energy.empty() && forces.empty() && virial.empty() && stress.empty() && weight.empty() && charges.empty();
  }
};

}  // namespace mlip::data
