#pragma once

#include <torch/optim/adam.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "archive/model_archive.h"
#include "dist/communicator.h"
#include "models/model.h"
#include "train/ema.h"
#include "train/sampler.h"

namespace mlip::train {

/// The parts of a training run that a checkpoint holds and that --restart and --init-model bring
/// back (docs/training.md "Restarting"). Pointers to the trainer's objects; none is owned.
struct TrainingState {
  /// The model being trained: its module holds the weights and the statistics, on `device`.
  models::Model* model = nullptr;
  /// The module's parameters in the module's order (those the optimiser steps): the raw
  /// weights; float32 or float64 as model.precision, on `device`.
  std::vector<torch::Tensor>* parameters = nullptr;
  /// The optimiser (its moments and step counts are saved and restored).
  torch::optim::Adam* optimizer = nullptr;
  /// The moving average of the weights; null when training.ema_decay is 0.
  Ema* ema = nullptr;
  /// The order of the training batches.
  SystemSampler* sampler = nullptr;
  /// The order of the validation batches; null without validation data.
  SystemSampler* validation_sampler = nullptr;
  /// Where the model trains (a checkpoint is written from host copies and loads onto this device).
  torch::Device device = torch::kCPU;
  /// The ranks of the run: its size is saved as world_size; rank 0 prints the notes.
  dist::Communicator* comm = nullptr;
  /// The extra files the run's checkpoints will carry: where the weights came from (the
  /// provenance files `finetune` and `change_bias` of the model restored from) is added.
  std::map<std::string, std::string>* metadata = nullptr;
};

/// The checkpoints of a run in its output folder (docs/training.md "Checkpoints"):
/// `<prefix>-<step>.pt` files, the `checkpoint` file naming the newest, the `<prefix>.pt` link to
/// it, and only the newest `max_keep` kept. Used by rank 0 only.
class CheckpointStore {
 public:
  /// `output_dir`: the folder of `-o`; `prefix`: training.save_ckpt; `max_keep`:
  /// training.max_ckpt_keep (at least one checkpoint is kept).
  CheckpointStore(std::string output_dir, std::string prefix, int64_t max_keep);

  /// The file of the checkpoint of `step`: `<output_dir>/<prefix>-<step>.pt`.
  std::string path(int64_t step) const;

  /// Writes the checkpoint of `step` atomically and returns its path. The module holds the
  /// averaged weights when there is a moving average (what test, freeze and --init-model use),
  /// else the raw ones; it is written from a host copy, so it loads without a GPU. Its extra
  /// files: `metadata` (the model's, docs/deploy.md) and mlip_checkpoint, step, world_size,
  /// sampler, val_sampler, optimizer, and with a moving average the raw `weights` and
  /// `ema_updates`. Then points `checkpoint` and `<prefix>.pt` at it and removes the oldest
  /// checkpoints beyond `max_keep`. Throws mlip::Error when a file cannot be written.
  std::string save(const TrainingState& state, const archive::ExtraFiles& metadata, int64_t step) const;

 private:
  /// The `checkpoint` file and the `<prefix>.pt` link name `path` (both replaced atomically).
  void point_to_newest(const std::string& path) const;
  /// Removes the `<prefix>-<step>.pt` files but the newest max_keep.
  void remove_oldest() const;

  std::string output_dir_;
  std::string prefix_;
  int64_t max_keep_;
};

/// What restore_training_state brings back.
enum class RestoreMode {
  /// --restart: everything, to continue the run exactly (weights, statistics, moving average,
  /// optimiser, step, sampler order).
  kRestart,
  /// --init-model: the weights and statistics only (the run starts at step 0 with a fresh
  /// optimiser).
  kInitModel,
};

/// Loads the checkpoint `given` names (a file, a folder or a save_ckpt prefix: archive::resolve_checkpoint)
/// into `state`, built for the input's model of registry type `model_type` with types
/// `type_map`. Returns the step the checkpoint was written at (kRestart), or 0 (kInitModel).
/// Throws mlip::Error when the checkpoint does not fit the input's model.
int64_t restore_training_state(const std::string& given, RestoreMode mode, const std::string& model_type,
                               const std::vector<std::string>& type_map, TrainingState& state);

/// Makes the start state identical on every rank: rank 0's module attributes (weights,
/// statistics, and float scalars such as avg_num_neighbors) broadcast to the others.
void broadcast_start_state(dist::Communicator& comm, torch::jit::Module& module);

}  // namespace mlip::train
