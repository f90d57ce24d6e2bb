// The MD ranks' collective operations a long-range model needs (docs/lammps.md "Long range
// across ranks"). Header only; no LibTorch, no MPI.
#pragma once

#include <cstdint>
#include <vector>

namespace mlip::md {

/// Sums and gathers over every MD rank (a LAMMPS pair style's MPI communicator). Collective:
/// every rank calls each operation the same number of times, in the same order.
class RankCollectives {
 public:
  virtual ~RankCollectives() = default;
  /// Replaces `values` [n] (n the same on every rank) by their sums over the ranks.
  virtual void sum(double* values, int64_t n) = 0;
  /// Every rank's `mine` [n] (n may differ between ranks) concatenated in rank order into `all`;
  /// returns where this rank's values start in it.
  virtual int64_t gather(const double* mine, int64_t n, std::vector<double>& all) = 0;
};

}  // namespace mlip::md
