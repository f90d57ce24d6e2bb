#pragma once

#include <cstdint>
#include <string>
#include <vector>


namespace mlip::models {

/// What a frozen model is and can do, written by `mlip freeze` as the extra file
/// `capabilities` (one "key: value" line each) and checked when MD loads the model
/// (docs/deploy.md "Capabilities"), so that MD needs no training input to use it.
struct Capabilities {
  std::string model_type;              ///< the registry name, e.g. "se_e2_a"
  std::vector<std::string> type_map;   ///< the type names in type-id order
  std::string dtype = "float64";       ///< "float64" or "float32": its parameters and inputs
  double cutoff = 0;                   ///< Å: pairs farther apart never interact
  int64_t message_layers = 1;          ///< an atom's energy depends on atoms this many cutoffs away
  std::vector<std::string> devices;    ///< where its TorchScript forward runs ("cpu", "cuda")
  std::vector<std::string> inference;  ///< devices with the model's own inference (models/inference.h)

  /// The extra file's text.
  std::string to_text() const;
  /// Reads to_text's format; errors name `source` and the line.
  static Capabilities parse(const std::string& text, const std::string& source);
};

}  // namespace mlip::models
