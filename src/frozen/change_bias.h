#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "data/label_keys.h"

namespace mlip::frozen {

/// `mlip change-bias <model> (-s <systems> | -b <values>) -o <output>`: a copy of a frozen model,
/// compressed model or checkpoint whose per-type energy shifts (models/energy_shift.h) are
/// re-fitted to labelled frames or set to given values (docs/training.md "Changing the energy
/// shifts"). Nothing else changes: the forces and virials it predicts are those of the input, bit
/// for bit, and every extra file is kept (a checkpoint stays restartable, a compressed model
/// compressed), with one more, `change_bias`, saying what was done.
struct ChangeBiasRequest {
  std::string model;                 ///< frozen model, checkpoint, or training folder
  std::string output;                ///< the file written (not the model itself)
  /// Re-fit: labelled systems (npy folders, extended XYZ, HDF5); their elements must be among the
  /// model's types. Each shift changes by the least-squares solution of the residual energies.
  std::vector<std::string> systems;
  int64_t frames_per_system = 0;     ///< -n: the first N frames of each system (0: all)
  data::LabelKeys keys;              ///< where the systems keep their labels
  /// Set: eV per atom of each named element (-b H=-13.6 O=-432.1): these types' shifts become
  /// the values, the others keep theirs. Either systems or values, not both.
  std::map<std::string, double> values;
};

/// Writes the changed model to request.output atomically; prints the shifts before and after,
/// and for a re-fit the per-atom energy RMSE before and after, to `log`. Throws mlip::Error for
/// bad input (an element the model lacks, a system without energies, output == model).
void change_bias(const ChangeBiasRequest& request, std::ostream& log);

}  // namespace mlip::frozen
