#pragma once

#include <ostream>
#include <string>

#include "models/compress_options.h"

namespace mlip::frozen {

/// What `mlip compress` is asked (docs/se_e2_a.md "Compression: the embedding nets as tables").
struct CompressRequest {
  std::string input;    ///< -i: a frozen model, a checkpoint, or a training folder
  std::string output;   ///< -o: the compressed frozen model
  /// -s, -e, -f; min_distance (--min-distance, Å) <= 0: found by scanning the training data.
  models::CompressOptions options;
  /// -t: the training input whose training systems are scanned for the shortest pair distance;
  /// empty: the input stored in the model, its paths taken from the current folder.
  std::string training_input;
};

/// `mlip compress`: the model frozen (as `mlip freeze` would) and compressed by its inference
/// entry (models/inference_registry.h) from its settings record, with the metadata,
/// capabilities and inference settings of a frozen model and an extra file `compression` saying
/// how. Refuses an output that is the input, and a model type without a compressed form.
/// Progress lines go to `log`.
void compress(const CompressRequest& request, std::ostream& log);

}  // namespace mlip::frozen
