#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/system.h"

namespace mlip::data {

/// What `mlip neighbor-stat` reports, as DeePMD-kit's neighbor-stat does.
struct NeighborStat {
  /// Smallest pair distance found over all frames, Å (infinity when no pair is within rcut).
  double min_distance = 0.0;
  /// [ntypes] over all centres and frames, the largest number of neighbours of each type
  /// within rcut.
  std::vector<int64_t> max_neighbors;
  /// Frames and systems looked at.
  int64_t frames = 0;
  /// Where the smallest distance was found ("system frame F atoms i-j").
  std::string min_where;
};

/// Distances below this (Å) mean two atoms sit on top of each other.
constexpr double kOverlapDistance = 1e-3;

/// Scans every frame of every system with the Kokkos neighbour list. ntypes is the length of
/// the type map. Throws mlip::Error when two atoms overlap (distance < kOverlapDistance),
/// naming the system, frame and atoms.
NeighborStat neighbor_stat(const std::vector<System>& systems, int ntypes, double rcut);

}  // namespace mlip::data
