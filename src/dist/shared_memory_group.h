#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/shm_all_reduce.h"

namespace mlip::dist {

/// The all-reduces of a communicator's ranks through POSIX shared memory when they all run on
/// one host (docs/distributed.md "Ranks on one host"), for any launcher: a main segment through
/// which any host tensor is copied, and one segment per reduce buffer (a buffer is this rank's
/// slot, reduced in place). The ranks agree on each segment through the communicator's own
/// collectives (`Agreement`); any rank that cannot map it, or see every rank's process, makes
/// it a "no" for all, and the communicator keeps its own all-reduce.
class SharedMemoryGroup {
 public:
  /// The communicator's collectives the ranks agree through (each called by every rank).
  struct Agreement {
    /// Rank 0's `value` under `key` (a name unique to this agreement), on every rank; the
    /// other ranks' `value` is ignored.
    std::function<std::string(const std::string& key, const std::string& value)> share;
    /// Whether `ok` holds on every rank.
    std::function<bool(const std::string& key, bool ok)> all;
    /// Returns when every rank has called it.
    std::function<void()> barrier;
  };

  /// `timeout`: how long a shared-memory wait lasts before it fails naming the rank.
  SharedMemoryGroup(int rank, int size, std::chrono::milliseconds timeout, Agreement agreement);

  /// Collective: maps the main segment (4 MB per rank; larger tensors go in parts), unless
  /// MLIP_SHM_ALLREDUCE=0. Whether the ranks use shared memory from now on.
  bool open();
  /// Whether the main segment is in use (open() succeeded on every rank).
  bool active() const { return main_ != nullptr; }

  /// Collective (when active): a zeroed buffer of `numel` values of `dtype` that is this rank's
  /// slot of a segment of its own, or an undefined tensor where that segment could not be had
  /// (the caller then makes an ordinary tensor). Throws mlip::Error when the segment fails on
  /// this rank after the others agreed.
  at::Tensor make_reduce_buffer(int64_t numel, at::ScalarType dtype);

  /// Sums host tensor t (contiguous; float64, float32 or int64) over the ranks in place, the
  /// first mean_count values divided by the number of ranks; false (nothing done) when not
  /// active, or t is on a device or of another dtype.
  bool all_reduce(at::Tensor& t, int64_t mean_count);

  /// Ends every rank's shared-memory waits at once (this rank is about to fail).
  void abort();

  /// Seconds this rank has waited for the last rank to arrive, over all segments.
  double arrival_wait_seconds() const;

 private:
  std::unique_ptr<ShmAllReduce> open_segment(const std::string& tag, size_t capacity, bool wanted);

  int rank_, size_;
  std::chrono::milliseconds timeout_;
  Agreement agreement_;
  std::unique_ptr<ShmAllReduce> main_;
  /// The reduce buffers' segments (shared with the buffers, which keep them mapped).
  std::vector<std::shared_ptr<ShmAllReduce>> buffers_;
  int buffers_made_ = 0;
};

}  // namespace mlip::dist
