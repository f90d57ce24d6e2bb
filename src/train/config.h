#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/label_keys.h"
#include "train/learning_rate.h"

namespace mlip::models {
struct ModelSettings;
}

namespace mlip::train {

/// training_data.batch_size / validation_data.batch_size: an int, a list (one per system), or
/// "auto" / "auto:N" (ceil(N / natoms) frames; "auto" = "auto:32").
struct BatchSize {
  enum class Kind { kFixed, kList, kAuto };
  Kind kind = Kind::kAuto;
  int64_t value = 32;          ///< kFixed: frames; kAuto: N
  std::vector<int64_t> list;   ///< kList
  /// Frames per batch for system `index` with `natoms` atoms. Throws mlip::Error when a list
  /// does not have an entry for the system.
  int64_t for_system(size_t index, int64_t natoms) const;
};

/// training.training_data or training.validation_data.
struct DataConfig {
  /// Paths as written, and resolved against the input file's folder.
  std::vector<std::string> systems;
  BatchSize batch_size;
  /// "prob_sys_size" (default), "prob_uniform", or "prob_sys_size;a:b:w;c:d:v".
  std::string auto_prob = "prob_sys_size";
  /// Explicit per-system probabilities (overrides auto_prob); empty when not given.
  std::vector<double> sys_probs;
  /// energy_key, forces_key, stress_key, virial_key, weight_key: where the files keep their labels
  /// (docs/data.md "Label keys"); empty names mean the defaults.
  data::LabelKeys keys;
  /// validation only: number of batches per evaluation.
  int64_t numb_btch = 1;
  /// validation only: rank 0 evaluates the whole set (docs/distributed.md).
  bool single_rank = false;
  /// validation only: shard like torch's DistributedSampler, padding with repeated frames
  /// (skewed metrics, announced with a warning); the default shards without padding.
  bool padded = false;
};

/// Everything `mlip train input.yaml` reads (docs/input.md; DeePMD key names). Defaults are
/// DeePMD-kit's.
struct TrainConfig {
  // model
  /// The `model` section, read by the model's registry entry (models/registry.h): its type,
  /// type_map, precision, cutoff and its own keys. Never null after parsing.
  std::shared_ptr<const models::ModelSettings> model;
  // learning_rate
  ExpLearningRate learning_rate;  ///< numb_steps filled from training.numb_steps
  std::string scale_by_worker = "linear";
  // loss
  double start_pref_e = 0.02, limit_pref_e = 1.0;
  double start_pref_f = 1000.0, limit_pref_f = 1.0;
  double start_pref_v = 0.0, limit_pref_v = 0.0;
  /// The charge labels' prefactors (docs/long_range.md "Charge labels"); 0: not trained on.
  double start_pref_q = 0.0, limit_pref_q = 0.0;
  // training
  DataConfig training_data;
  /// training.config_type_weights (MACE's): the loss weight of the frames of each config_type
  /// (docs/training.md "Weights"); a type not named weighs 1.
  std::map<std::string, double> config_type_weights;
  std::optional<DataConfig> validation_data;
  int64_t numb_steps = 0;
  std::optional<uint64_t> seed;
  std::string disp_file = "lcurve.out";
  int64_t disp_freq = 1000;
  int64_t save_freq = 1000;
  std::string save_ckpt = "model.ckpt";
  int64_t max_ckpt_keep = 5;
  /// Decay of the moving average of the weights (train/ema.h) that validation, checkpoints
  /// and frozen models use; 0 turns it off (the raw weights are used, as DeePMD-kit does).
  double ema_decay = 0.99;
  /// training.device: "auto" (CUDA when the build and the machine have it, else the CPU),
  /// "cpu", "cuda" or "cuda:K"; `mlip train --device` overrides it (train/device.h).
  std::string device = "auto";
  /// training.cache_mb: the memory budget of the cache of made frames (the model's inputs and
  /// labels), MB per rank; -1 ("all"): no limit, every frame stays once made (docs/data.md).
  double cache_mb = 1024;
  /// training.data_workers: threads that read frames and make the model's inputs ahead of the
  /// steps (0: the training thread makes each frame when it needs it); -1 ("auto"): 1, or 0
  /// when training on the CPU with a thread on every CPU (docs/data.md "Worker threads").
  int64_t data_workers = -1;
  /// training.cuda_graphs: whether each training step runs from static buffers and is replayed
  /// as a captured CUDA graph (docs/device.md "Static shapes"): unset ("auto"): on a CUDA
  /// device with one rank; true asks for it anywhere (on the CPU the step runs from the static
  /// buffers without capture, with a message); false (the default until the capture has been
  /// verified on a GPU): never.
  std::optional<bool> cuda_graphs = false;
  // provenance
  std::string input_path;  ///< the file read ("" for parse_train_config without one)
  std::string input_dir;   ///< its folder: relative system paths are taken from here
  std::string input_text;  ///< the file's text, stored in checkpoints and frozen models
};

/// Reads and checks a training input (YAML, or DeePMD's JSON, which is YAML). Strict: a key
/// the program does not know is an error naming its path and the nearest known key
/// (`training.numb_step: unknown key; did you mean 'numb_steps'?`); a value of the wrong type
/// names what was expected and what was found (`training.batch_size: expected a positive
/// integer, a list of them, or "auto[:N]", got -3`); keys starting with '_' are comments.
/// Relative system paths are resolved against the file's folder. Throws mlip::Error, with
/// the file name in front, for every problem (also a missing file or a YAML syntax error with
/// its line).
TrainConfig load_train_config(const std::string& path);

/// The same from text; `source` names it in messages, `input_dir` resolves relative paths.
TrainConfig parse_train_config(const std::string& text, const std::string& source, const std::string& input_dir);


}  // namespace mlip::train

namespace mlip::train {

/// The model settings of `config` as the model's own type (e.g. models::SeASettings); throws
/// std::bad_cast for another model type.
template <class Settings>
const Settings& model_settings(const TrainConfig& config) {
  return dynamic_cast<const Settings&>(*config.model);
}

}  // namespace mlip::train
