#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/overlap.h"
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

/// The sample behind se_e2_a's `sel: auto`: at most this many frames in all (docs/data.md
/// "Statistics from a sample").
constexpr int64_t kNeighborStatSampleFrames = 2000;

/// Scans frames of the systems (read with System::frame, in memory or streamed) with the Kokkos
/// neighbour list. ntypes is the length of the type map. max_frames < 0: every frame of every
/// system; otherwise a sample of at most max(max_frames, number of systems) frames: from each
/// system max(1, max_frames / systems) frames evenly spaced over it, its first and last included.
/// Throws mlip::Error when two atoms overlap (distance < kOverlapDistance), naming the system,
/// frame and atoms.
NeighborStat neighbor_stat(const std::vector<System>& systems, int ntypes, double rcut, int64_t max_frames = -1);

/// The frames neighbor_stat looks at in a system of `nframes` frames when it may take `take`
/// of them (take >= nframes: all): evenly spaced, first and last included, increasing.
std::vector<int64_t> evenly_spaced_frames(int64_t nframes, int64_t take);

}  // namespace mlip::data
