#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace mlip::dist {

/// A sum all-reduce between the ranks of one host through a POSIX shared-memory segment
/// (/dev/shm): each rank's values are in its slot (copied there, or written there by the caller),
/// each rank sums one chunk of the elements over the slots in rank order into its own slot, and
/// then copies the other ranks' summed chunks from their slots. For ranks on one
/// host it replaces Gloo's TCP loopback (docs/distributed.md); every element is summed in rank
/// order by one rank, so all ranks get identical bits.
///
/// Waiting is a spin on per-rank counters in the segment (then yields, then short sleeps). A
/// rank whose process has ended is noticed within ~10 ms, and a rank that stops answering
/// after `timeout`; both throw mlip::Error naming the rank.
class ShmAllReduce {
 public:
  /// Rank 0 creates the segment `name` (e.g. "/mlip-1234-5678") for `size` ranks and
  /// `capacity` bytes per rank, reserving its memory (so a full /dev/shm is an error here, not
  /// a SIGBUS later), and writes `token` into it; the others open it and check the token.
  /// Throws mlip::Error when the segment cannot be created, opened or reserved, or holds another
  /// token (a different /dev/shm). Every rank must construct it before any rank calls unlink().
  ShmAllReduce(const std::string& name, int rank, int size, size_t capacity, uint64_t token,
               std::chrono::milliseconds timeout);
  ~ShmAllReduce();
  ShmAllReduce(const ShmAllReduce&) = delete;
  ShmAllReduce& operator=(const ShmAllReduce&) = delete;

  /// Removes the segment's name (rank 0; the mappings stay valid), so that nothing is left in
  /// /dev/shm when the job ends, however it ends.
  void unlink();

  /// Whether every rank's process is visible from this one (same PID namespace, compared by
  /// the inode of /proc/self/ns/pid), which the detection of an ended rank needs. Call after
  /// every rank has constructed.
  bool peers_visible() const;

  /// Marks the segment failed: the other ranks' waits end at once with an error (this rank is
  /// about to exit).
  void abort();

  /// Wall seconds this rank has spent, in all its all-reduces so far, waiting for the other
  /// ranks to arrive (the part of an all-reduce's time that is load imbalance, not transfer;
  /// counted at the first part of a call only, the later parts' waits being transfer).
  double arrival_wait_seconds() const { return arrival_wait_seconds_; }

  /// Bytes per rank this segment can reduce at once.
  size_t capacity() const { return capacity_; }

  /// Sums data[0, n) over the ranks, in place (T = float, double or int64_t); the first
  /// `mean_count` results are then divided by the number of ranks, in the same pass (float and
  /// double only). Collective: every rank calls it with the same n, mean_count and T.
  /// n * sizeof(T) may exceed capacity() (done in parts, each copied into this rank's slot,
  /// summed as all_reduce_sum_in_slot does, and copied back).
  template <typename T>
  void all_reduce_sum(T* data, int64_t n, int64_t mean_count = 0);

  /// This rank's slot: capacity() bytes, 64-byte aligned, valid while this object lives. Values
  /// written here can be summed by all_reduce_sum_in_slot without a copy.
  void* own_slot() const { return slot(rank_); }

  /// Sums the first n values of type T of every rank's own slot over the ranks, in place in the
  /// slots (nothing is copied in or out): each rank sums one chunk of the elements over the
  /// slots in rank order into its own slot, then copies the other chunks from their ranks'
  /// slots. The first `mean_count` results are divided by the number of ranks as they are
  /// summed (float and double only). Collective: every rank calls it with the same n,
  /// mean_count and T; n * sizeof(T) <= capacity().
  template <typename T>
  void all_reduce_sum_in_slot(int64_t n, int64_t mean_count = 0);

 public:
  struct Header;  // the segment's layout (shm_all_reduce.cpp)

 private:
  /// Publishes this rank's arrival at `phase` and waits until every rank has arrived there.
  void arrive_and_wait(uint64_t phase);
  char* slot(int r) const;
  /// The collective part of both all-reduces: every rank's first m values are in its slot.
  template <typename T>
  void reduce_slots(int64_t m, int64_t mean_count, bool count_arrival);

  std::string name_;
  int rank_, size_;
  size_t capacity_;
  std::chrono::milliseconds timeout_;
  size_t bytes_ = 0;
  void* base_ = nullptr;
  Header* header_ = nullptr;
  uint64_t phase_ = 0;
  bool unlinked_ = false;
  double arrival_wait_seconds_ = 0;
};

}  // namespace mlip::dist
