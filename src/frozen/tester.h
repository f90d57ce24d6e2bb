#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/label_keys.h"

namespace mlip::frozen {

/// `mlip test -m model -s systems [-n N] [-d prefix]`.
struct TestOptions {
  std::string model;                 ///< frozen model, checkpoint, or training folder
  std::vector<std::string> systems;
  int64_t numb_test = 0;             ///< frames per system (0: all)
  std::string detail;                ///< prefix of the .e.out/.e_peratom.out/.f.out/.v.out files
  data::LabelKeys keys;              ///< where the files keep their labels (docs/data.md "Label keys")
  /// --xyz: write the frames with the predictions (mlip_energy, mlip_forces, mlip_stress) here
  /// as extended XYZ (docs/data.md "Predictions as extended XYZ"); empty: none.
  std::string xyz;
};

/// Per-system and weighted metrics of docs/training.md "Other commands". Energies, forces and
/// virials are predicted through the model's forward() (the deploy path, from positions;
/// models/torchscript_inference.h).
/// Prints the report to stdout; returns 0. Throws mlip::Error for bad input.
int run_test(const TestOptions& options);

}  // namespace mlip::frozen
