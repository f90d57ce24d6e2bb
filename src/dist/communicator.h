#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "dist/launch_env.h"

namespace mlip::dist {

/// Collectives over the ranks of one run (docs/distributed.md). Implementations: c10d's Gloo process
/// group with a TCPStore rendezvous (the torchrun protocol; CPU tensors), MPI when started by
/// mpirun (Debian's LibTorch is built without c10d's MPI group, so the MPI library is called
/// directly), c10d's NCCL group when built against a CUDA LibTorch, and a one-rank no-op.
/// Every collective is blocking; a failed or timed-out one throws mlip::Error naming this rank,
/// the operation and, when another rank announced its failure, that rank and its message.
class Communicator {
 public:
  virtual ~Communicator() = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// "none", "gloo", "mpi" or "nccl".
  virtual std::string backend() const = 0;
  /// How all-reduces travel: "shared memory" (ranks on one host, under Gloo or MPI), "Gloo
  /// over TCP", "MPI", "NCCL" or "none".
  virtual std::string all_reduce_transport() const { return backend() == "mpi" ? "MPI" : "none"; }

  /// Sums a contiguous tensor (float64, float32 or int64) over all ranks, in place, then divides
  /// its first `mean_count` elements by the number of ranks (their mean; float types only), in
  /// the same pass where the transport allows (shared memory).
  void all_reduce_sum(at::Tensor& tensor, int64_t mean_count = 0);
  /// A zeroed 1-D CPU tensor of `numel` values of `dtype` (float64, float32 or int64) for
  /// repeated all_reduce_sum calls on the whole of it. Collective: every rank calls it with the
  /// same arguments, and later passes its buffer where the others pass theirs. Through shared
  /// memory the buffer is this rank's slot of a segment of its own, so its all-reduces copy
  /// nothing in or out (the memory stays valid while the tensor or a view of it lives);
  /// elsewhere it is an ordinary tensor.
  virtual at::Tensor make_reduce_buffer(int64_t numel, at::ScalarType dtype);
  /// Copies rank `root`'s tensor into every rank's (same shape and dtype on all), in place.
  void broadcast(at::Tensor& tensor, int root = 0);
  /// Waits until every rank has arrived.
  void barrier();

  /// Tells the other ranks (best effort) that this rank is about to exit with `what`.
  virtual void announce_failure(const std::string& what) { (void)what; }

  /// Collectives issued so far (all-reduces, broadcasts, barriers), and the all-reduces alone.
  int64_t collectives() const { return collectives_; }
  int64_t all_reduces() const { return all_reduces_; }
  /// Wall seconds spent inside collectives so far.
  double seconds() const { return seconds_; }
  /// Of the all-reduces' time so far, the wall seconds spent waiting for the other ranks to
  /// arrive (load imbalance, not transfer), where the transport can tell (shared memory);
  /// negative elsewhere.
  virtual double all_reduce_arrival_wait_seconds() const { return -1; }

 protected:
  Communicator(int rank, int size) : rank_(rank), size_(size) {}
  /// Sums in place and divides the first mean_count elements by size() (see all_reduce_sum).
  virtual void do_all_reduce(at::Tensor& tensor, int64_t mean_count) = 0;
  /// Divides tensor[0, mean_count) by size(): for the transports that cannot do it as they sum.
  void divide_first(at::Tensor& tensor, int64_t mean_count) const;
  virtual void do_broadcast(at::Tensor& tensor, int root) = 0;
  virtual void do_barrier() = 0;
  /// The failure another rank announced, or "" (best effort, bounded wait).
  virtual std::string announced_failure() { return ""; }

 private:
  template <typename F>
  void timed(const char* what, F&& f);

  int rank_ = 0, size_ = 1;
  int64_t collectives_ = 0, all_reduces_ = 0;
  double seconds_ = 0;
};

struct CommOptions {
  /// "auto" (mpi under mpirun when built with MPI, else nccl when `cuda` and built with NCCL,
  /// else gloo), "gloo", "mpi", "nccl".
  std::string backend = "auto";
  /// The ranks train on CUDA devices (their gradients live there).
  bool cuda = false;
  /// A collective (or the rendezvous) that waits longer than this fails with an error.
  std::chrono::seconds timeout{240};
};

/// Whether this build has the MPI backend / the NCCL backend.
bool have_mpi();
bool have_nccl();

/// The communicator for `env`: a one-rank no-op when env.world_size is 1, else the backend of
/// `options` (rendezvous at env.master_addr:master_port for gloo and nccl). Throws mlip::Error
/// for a backend this build lacks or a rendezvous that fails.
std::unique_ptr<Communicator> make_communicator(const LaunchEnv& env, const CommOptions& options);

}  // namespace mlip::dist
