#pragma once
// `mlip model-devi`: how much a committee of models disagrees on each frame, in DeePMD-kit's
// model_devi.out layout (docs/active_learning.md).

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/label_keys.h"
#include "models/inference.h"

namespace mlip::frozen {

/// `mlip model-devi -m m0 m1 ... -s systems -o out [-f FREQ] [--atomic] [--relative L] [--relative_v L]`.
struct DeviationOptions {
  std::vector<std::string> models;   ///< frozen models, checkpoints or training folders (two or more)
  std::vector<std::string> systems;  ///< systems in any format `train` reads; labels not needed
  std::string output = "model_devi.out";
  int64_t frequency = 1;             ///< the step of frame k is k * frequency
  bool atomic = false;               ///< one atm_devi_f column per atom
  std::optional<double> relative;    ///< L, eV/Å: each atom's force deviation / (|mean force| + L)
  std::optional<double> relative_v;  ///< L, eV: the virial's deviations / (|mean virial per atom| + L)
  data::LabelKeys keys;              ///< where the files keep their labels (docs/data.md)
  /// --select LO HI (eV/Å): frames with LO <= max_devi_f < HI (DP-GEN's trust levels) are
  /// written to `candidates` as extended XYZ; unset: none.
  std::optional<std::pair<double, double>> select;
  std::string candidates = "candidates.extxyz";
};

/// One frame's deviations (docs/active_learning.md "Definitions"): population standard
/// deviations over the models.
struct FrameDeviation {
  /// eV per atom: the largest and smallest of the virial's nine component deviations, and
  /// their Euclidean norm / 3.
  double max_devi_v = 0, min_devi_v = 0, avg_devi_v = 0;
  /// eV/Å: the largest, smallest and mean force deviation over the atoms.
  double max_devi_f = 0, min_devi_f = 0, avg_devi_f = 0;
  double devi_e = 0;                ///< eV per atom: the deviation of E / N
  std::vector<double> atom_devi_f;  ///< [natoms] eV/Å, each atom's force deviation
};

/// The deviations of one frame of `natoms` atoms from each model's prediction (energy, forces
/// [natoms * 3], virial [9]), in float64. relative / relative_v as in DeviationOptions.
FrameDeviation frame_deviation(const std::vector<models::InferenceResult>& predictions, int64_t natoms,
                               std::optional<double> relative, std::optional<double> relative_v);

/// DeePMD-kit's header of a system's block: "# <system>" then "#       step    max_devi_v ..."
/// (with "atm_devi_f(N)" after devi_e when atomic), each line ending in '\n'.
std::string deviation_header(const std::string& system, bool atomic);

/// One row: the step as %12d, then the seven deviations (and each atom's, when atomic) as %19.6e.
std::string deviation_row(int64_t step, const FrameDeviation& d, bool atomic);

/// Evaluates every frame of every system with every model (their TorchScript forward) and
/// writes options.output (replacing an old file only once complete). Prints a line per system.
/// Throws mlip::Error for bad input (models that disagree on the type map, fewer than two).
int run_model_deviation(const DeviationOptions& options);

}  // namespace mlip::frozen
