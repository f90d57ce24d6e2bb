#pragma once

#include <string>

#include "train/config.h"

namespace mlip::train {

/// Command-line options of `mlip train` besides the input file.
struct TrainOptions {
  /// Continue a run from this checkpoint exactly (weights, statistics, optimiser, step, sampler).
  std::string restart;
  /// Start from these weights and statistics, at step 0 with a fresh optimiser.
  std::string init_model;
  /// Folder for lcurve.out and the checkpoints (default: the working folder).
  std::string output_dir = ".";
  /// When set, the wall time of every step (forward, backward, update; ms) is written there.
  std::string step_times;
};

/// Runs the training of training.md. Returns the exit code: 0 when all steps ran, 130 when
/// interrupted by SIGINT (after saving a checkpoint). Throws mlip::Error for bad input.
int train(const TrainConfig& config, const TrainOptions& options);

}  // namespace mlip::train
