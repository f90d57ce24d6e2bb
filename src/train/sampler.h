#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace mlip::train {

/// The probability of each system per step (docs/training.md "Sampling across systems").
/// nbatch[s] = ceil(frames_s / batch_s). auto_prob: "prob_sys_size" (p ∝ nbatch),
/// "prob_uniform", or "prob_sys_size;a:b:w;c:d:v" (systems [a, b) share weight w, within the
/// block ∝ nbatch; weights normalised). A non-empty sys_probs overrides auto_prob. Throws
/// mlip::Error naming `key` for malformed or inconsistent input.
std::vector<double> system_probabilities(const std::vector<int64_t>& nbatch, const std::string& auto_prob,
                                         const std::vector<double>& sys_probs, const std::string& key);

/// Each step draws ONE system (with the given probabilities), then the next batch of that
/// system: every system cycles through its frames in a shuffled order, reshuffled at every
/// pass. Seeded and serialisable, so a restart continues the exact same sequence.
///
/// Over `ranks` ranks (docs/distributed.md) every rank runs the same sampler, so all draw the same
/// system; a batch is then the global batch of ranks x batch[s] frames and each rank takes its
/// shard. As torch's DistributedSampler does, a pass over a system of n frames is padded to a
/// multiple of `ranks` by repeating the first frames of its shuffled order. With ranks = 1 and
/// batch b this is exactly the sampler of one rank with batch ranks x b when n is a multiple of
/// ranks.
class SystemSampler {
 public:
  /// frames[s]: frames of system s; batch[s]: frames per batch and rank (capped at the padded
  /// frames / ranks).
  SystemSampler(std::vector<int64_t> frames, std::vector<int64_t> batch, std::vector<double> probabilities,
                uint64_t seed, int ranks = 1);

  struct Batch {
    size_t system = 0;
    std::vector<int64_t> frames;  ///< the global batch: ranks x per-rank batch frames
  };
  /// The next batch.
  Batch next();
  /// The frames of `batch` that rank `rank` takes (a contiguous shard).
  std::vector<int64_t> shard(const Batch& batch, int rank) const;
  /// Frames repeated per pass over system s to pad it to a multiple of the ranks.
  int64_t padding(size_t s) const { return padded_[s] - frames_[s]; }
  /// Frames per batch and rank of system s (after capping).
  int64_t batch(size_t s) const { return batch_[s]; }
  int ranks() const { return ranks_; }

  /// The whole state (generator, orders, cursors) as text, and back.
  std::string state() const;
  void set_state(const std::string& state);

  const std::vector<double>& probabilities() const { return probabilities_; }

 private:
  void reshuffle(size_t s);
  uint64_t below(uint64_t n);  ///< uniform integer in [0, n), same on every platform

  int ranks_ = 1;
  std::vector<int64_t> frames_, padded_, batch_;
  std::vector<double> probabilities_, cumulative_;
  std::vector<std::vector<int64_t>> order_;
  std::vector<int64_t> cursor_;
  std::mt19937_64 rng_;
};

}  // namespace mlip::train
