#pragma once

#include <array>
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

/// Bytes one neighbour pair takes in a double-precision neighbour list (data/neighbor_list.h),
/// with the builder's 1/8 growth margin.
constexpr double kNeighborPairBytes = 42.0 * 9.0 / 8.0;

/// An estimate of the pairs within `rcut` in one frame of `natoms` atoms at `positions` ([natoms,
/// 3], Å), from their density: natoms^2 times, in each direction, (4/3 pi)^(1/3) rcut over the
/// cell's thickness (periodic: images included) or over the atoms' extent (not periodic: at most
/// 1). Close to the real count for uniform matter; 0 when the cell cannot be used (the neighbour
/// list then reports it).
double estimate_neighbor_pairs(const double* positions, int64_t natoms, const double* cell,
                               std::array<bool, 3> pbc, double rcut);

/// The memory this process may still take, in bytes: MemAvailable of /proc/meminfo, else the
/// physical memory; 0 when unknown.
double available_memory_bytes();

/// Scans frames of the systems (read with System::frame, in memory or streamed) with the Kokkos
/// neighbour list. ntypes is the length of the type map. max_frames < 0: every frame of every
/// system; otherwise a sample of at most max(max_frames, number of systems) frames: from each
/// system max(1, max_frames / systems) frames evenly spaced over it, its first and last included.
/// Throws mlip::Error when two atoms overlap (distance < kOverlapDistance), naming the system,
/// frame and atoms; and, before allocating, when a frame's neighbour list would need more memory
/// than is available (estimate_neighbor_pairs), naming `rcut_name` (where the radius came from:
/// "-r", "model.descriptor.rcut"), the radius, the frame and the memory it would need. A failed
/// allocation is an mlip::Error in the same words.
NeighborStat neighbor_stat(const std::vector<System>& systems, int ntypes, double rcut, int64_t max_frames = -1,
                           const std::string& rcut_name = "rcut");

/// The frames neighbor_stat looks at in a system of `nframes` frames when it may take `take`
/// of them (take >= nframes: all): evenly spaced, first and last included, increasing.
std::vector<int64_t> evenly_spaced_frames(int64_t nframes, int64_t take);

}  // namespace mlip::data
