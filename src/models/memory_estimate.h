#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mlip::models {

/// The sizes of one training batch that a model's memory depends on (docs/training.md "Memory
/// checked before the first allocation").
struct BatchSizes {
  std::string system;  ///< the training system's name, for messages
  int64_t atoms = 0;   ///< atoms in each frame
  int64_t frames = 1;  ///< frames in one batch of that system
  /// Estimated ordered pairs (i, j), periodic images included, within the model's cutoff in one
  /// frame (data::estimate_neighbor_pairs of the system's first frame).
  double pairs = 0.0;
  /// Made frames (the model's inputs of a frame, Model::prepare_frame) held at once besides the
  /// batch's own: those the data workers make ahead of the steps and are making (0 without
  /// workers: each frame is made when its step needs it).
  int64_t frames_ahead = 0;
};

/// One part of what a training holds in memory, and the settings that size it.
struct MemoryPart {
  std::string what;      ///< what it is: "the weights, their gradients and Adam's two moments"
  std::string settings;  ///< the keys and values that size it: "model.num_bessels 100000000, ..."
  double bytes = 0.0;    ///< its bytes, estimated
};

/// An estimate of a training's memory, by part: what the model cannot train without (its weights
/// and the optimiser's copies of them, one batch's geometry and activations); LibTorch's own
/// buffers and the frame cache (training.cache_mb) come on top. docs/training.md "Memory checked
/// before the first allocation" compares it with measured peaks.
struct MemoryEstimate {
  std::vector<MemoryPart> parts;
  /// One made frame of the batch's system (what Model::prepare_frame returns and the frame cache
  /// keeps), bytes; 0 when the model does not say. The trainer adds the cache's share from it.
  double frame_bytes = 0.0;
  double total() const;
};

/// Throws mlip::Error when `estimate` needs more than `available_bytes` (0: unknown, nothing is
/// checked). The message names the largest part (its settings and bytes), the total, what is
/// available and `batch` (the batch the estimate is for): e.g. `model.num_features 100000,
/// num_layers 3: training would need about 745.1 GiB of memory (the weights, ...), and
/// 19.8 GiB are available (... a batch of 1 frame of 192 atoms of data/train); is the size
/// right?`.
void check_memory(const MemoryEstimate& estimate, double available_bytes, const BatchSizes& batch,
                  const std::string& available_what);

/// "[25, 50, 100]".
std::string list_text(const std::vector<int64_t>& values);

}  // namespace mlip::models
