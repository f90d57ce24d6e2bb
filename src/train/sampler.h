#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace mlip::train {

/// The probability of each system per step (training.md "Sampling across systems").
/// nbatch[s] = ceil(frames_s / batch_s). auto_prob: "prob_sys_size" (p ∝ nbatch),
/// "prob_uniform", or "prob_sys_size;a:b:w;c:d:v" (systems [a, b) share weight w, within the
/// block ∝ nbatch; weights normalised). A non-empty sys_probs overrides auto_prob. Throws
/// mlip::Error naming `key` for malformed or inconsistent input.
std::vector<double> system_probabilities(const std::vector<int64_t>& nbatch, const std::string& auto_prob,
                                         const std::vector<double>& sys_probs, const std::string& key);

/// Each step draws ONE system (with the given probabilities), then the next batch of that
/// system: every system cycles through its frames in a shuffled order, reshuffled at every
/// pass. Seeded and serialisable, so a restart continues the exact same sequence.
class SystemSampler {
 public:
  /// frames[s]: frames of system s; batch[s]: frames per batch (capped at frames[s]).
  SystemSampler(std::vector<int64_t> frames, std::vector<int64_t> batch, std::vector<double> probabilities,
                uint64_t seed);

  struct Batch {
    size_t system = 0;
    std::vector<int64_t> frames;
  };
  /// The next batch.
  Batch next();

  /// The whole state (generator, orders, cursors) as text, and back.
  std::string state() const;
  void set_state(const std::string& state);

  const std::vector<double>& probabilities() const { return probabilities_; }

 private:
  void reshuffle(size_t s);
  uint64_t below(uint64_t n);  ///< uniform integer in [0, n), same on every platform

  std::vector<int64_t> frames_, batch_;
  std::vector<double> probabilities_, cumulative_;
  std::vector<std::vector<int64_t>> order_;
  std::vector<int64_t> cursor_;
  std::mt19937_64 rng_;
};

}  // namespace mlip::train
