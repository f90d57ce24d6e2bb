#pragma once

#include <torch/script.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <thread>
#include <tuple>
#include <vector>

#include "data/system.h"
#include "models/model.h"
#include "models/repulsion_labels.h"

namespace mlip::train {

/// One frame made ready for a training or validation step: the model's input and the labels,
/// on the model's device (docs/data.md "The cache").
struct PreparedFrame {
  std::unique_ptr<models::FrameInput> input;
  torch::Tensor energy;  ///< [1] float64, eV
  torch::Tensor force;   ///< [N, 3] float64, eV/Å; undefined when the system has no force labels
  torch::Tensor virial;  ///< [9] float64, eV; undefined when the system has no virial labels
  torch::Tensor charge;  ///< [N] float64, e; undefined when the system has no charge labels
  double weight = 1.0;   ///< the frame's loss weight (data::Frame::weight)
  int64_t bytes = 0;     ///< memory held by all of the above
};

/// What a FrameStore may hold and how it makes frames.
struct FrameStoreOptions {
  /// The cache's budget, bytes (training.cache_mb); < 0: no limit (cache_mb: all).
  int64_t budget_bytes = int64_t(1024) << 20;
  /// Worker threads that make prefetched frames (training.data_workers); 0: every frame is made
  /// by the thread that asks for it.
  int workers = 1;
  /// Where to say, once, that the budget is smaller than one frame (nullptr: nowhere).
  std::ostream* log = nullptr;
  /// model.pair_repulsion's part of the labels, subtracted from each frame's (docs/repulsion.md
  /// "In training"); nullptr: none.
  std::shared_ptr<const models::RepulsionLabels> repulsion;
};

/// Reads frames of systems (streamed or in memory), makes the model's inputs for them on worker
/// threads ahead of the steps that use them, and keeps made frames in a cache bounded by a
/// memory budget, least recently used out first (docs/data.md).
///
/// What a frame holds never depends on the workers, the budget or the cache: a made frame is a
/// pure function of the frame's data and the model's settings.
class FrameStore {
 public:
  FrameStore(models::Model& model, torch::Device device, FrameStoreOptions options);
  ~FrameStore();
  FrameStore(const FrameStore&) = delete;
  FrameStore& operator=(const FrameStore&) = delete;

  /// Registers a set of systems (training, validation); returns its id. The systems must outlive
  /// the store.
  int add_set(const std::vector<data::System>& systems);
  /// Asks the workers to make these frames of system `system` of set `set` (in this order),
  /// unless they are cached or already asked for. Without workers it does nothing.
  void prefetch(int set, size_t system, const std::vector<int64_t>& frames);
  /// The frame: from the cache, from the prefetched frames, or made now by the calling thread
  /// (then, or when a worker is still making it, the call counts as a wait). Rethrows a
  /// worker's error for this frame.
  std::shared_ptr<const PreparedFrame> get(int set, size_t system, int64_t frame);
  /// Makes the frame now, on the calling thread, and caches it (nothing to do when it is cached
  /// already). Returns false, and caches nothing, when the frame would not fit in the budget
  /// beside the frames cached: the cache never lets a frame go for one made this way. Used
  /// before the first step (docs/data.md "Frames made before the first step").
  bool make_into_cache(int set, size_t system, int64_t frame);

  /// The worker threads (FrameStoreOptions::workers).
  int workers() const { return int(workers_.size()); }
  /// get() calls that found the frame neither cached nor prefetched and ready.
  int64_t waits() const;
  /// Bytes held by the cache now.
  int64_t cached_bytes() const;
  /// Frames made so far (by workers and callers) and the seconds spent making them (reading
  /// the frame, the model's prepare_frame, the labels to the device).
  struct MakeTime {
    int64_t frames = 0;
    double seconds = 0;
  };
  MakeTime make_time() const;

 private:
  using Key = std::tuple<int, size_t, int64_t>;
  /// A frame asked for by prefetch(): queued, being made, or made (and not yet taken by get()).
  struct Pending {
    bool started = false, done = false;
    std::shared_ptr<const PreparedFrame> frame;
    std::exception_ptr error;
  };

  std::shared_ptr<const PreparedFrame> make(const Key& key);
  void insert_into_cache(const Key& key, const std::shared_ptr<const PreparedFrame>& frame);
  void work();

  models::Model& model_;
  torch::Device device_;
  FrameStoreOptions options_;
  /// The constructing thread's TorchScript executor mode (torch::jit::getGraphExecutorOptimize),
  /// which is per thread: the workers take it, so that a frame is made the same way by a worker
  /// as by the training thread (docs/data.md "Determinism").
  bool graph_executor_optimize_;
  std::vector<const std::vector<data::System>*> sets_;

  mutable std::mutex mutex_;
  std::condition_variable work_ready_, frame_done_;
  std::deque<Key> queue_;              // keys waiting for a worker
  std::map<Key, Pending> pending_;     // asked-for frames not yet taken
  // The cache: most recently used at the front.
  std::list<std::pair<Key, std::shared_ptr<const PreparedFrame>>> lru_;
  std::map<Key, decltype(lru_)::iterator> cached_;
  int64_t cached_bytes_ = 0, waits_ = 0;
  bool said_too_small_ = false, stopping_ = false;
  mutable std::mutex timing_mutex_;
  int64_t made_ = 0;
  double make_seconds_ = 0;
  std::vector<std::thread> workers_;
};

}  // namespace mlip::train
