#pragma once

#include <string>

#include "dist/communicator.h"
#include "dist/launch_env.h"
#include "train/config.h"

namespace mlip::train {

/// Command-line options of `mlip train` besides the input file.
struct TrainOptions {
  /// Continue a run from this checkpoint exactly (weights, statistics, optimiser, step, sampler).
  std::string restart;
  /// Start from these weights and statistics, at step 0 with a fresh optimiser.
  std::string init_model;
  /// Start from the weights of this trained model (frozen or checkpoint) that the input's model
  /// shares with it by element, the type map free (docs/training.md "Fine-tuning"), at step 0
  /// with a fresh optimiser; the energy shifts fitted to the new data.
  std::string finetune;
  /// Folder for lcurve.out and the checkpoints (default: the working folder).
  std::string output_dir = ".";
  /// When set, the wall time of every step (forward, backward, update; ms) is written there.
  std::string step_times;
  /// `--count-ops`: the step times also count each step's LibTorch operator calls and autograd
  /// nodes (train/operation_counter.h); needs step_times.
  bool count_ops = false;
  /// `--device`: "auto", "cpu", "cuda" or "cuda:K"; empty: training.device decides
  /// (train/device.h).
  std::string device;
  /// The ranks of a distributed run (docs/distributed.md); nullptr: one process. Rank 0 computes the
  /// statistics and writes lcurve, checkpoints and progress; gradients are synchronised by
  /// SimpleDDP.
  dist::Communicator* comm = nullptr;
  /// How the run was launched, for the summary block (nullptr: not launched by a launcher).
  const dist::LaunchEnv* launch = nullptr;
  /// Added to every seed the run draws: training.seed (or the random one drawn without it) for
  /// the samplers, and the model's weight seeds (models::ModelContext::seed_offset). Member k of
  /// a committee (`--committee N --member k`) trains with k; 0 is a plain run.
  uint64_t seed_offset = 0;
};

/// Runs the training of docs/training.md for the model the input selects (models/registry.h),
/// on the device of TrainOptions::device or training.device. Returns the exit code: 0 when all steps ran, 130 when
/// interrupted by SIGINT and 143 by SIGTERM (after saving a checkpoint; every rank stops after
/// the same step). Throws mlip::Error for bad input.
int train(const TrainConfig& config, const TrainOptions& options);

}  // namespace mlip::train
