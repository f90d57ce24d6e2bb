#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "data/neighbor_list.h"

namespace mlip::data {

/// Distances below this (Å) mean two atoms sit on top of each other: no model has a finite
/// energy there (docs/data.md "Overlapping atoms").
constexpr double kOverlapDistance = 1e-3;

/// Two atoms closer than kOverlapDistance.
struct Overlap {
  int64_t i = 0;  ///< the first atom (an index into the positions given)
  int64_t j = 0;  ///< the second atom (an index into the positions given)
  double distance = 0;  ///< |r_j - r_i + shift · cell|, Å
  /// Which periodic image of j lies on i: multiples of the three cell vectors (all 0: j itself).
  std::array<int, 3> shift{{0, 0, 0}};
};

/// The closest pair of atoms of one frame closer than kOverlapDistance, periodic images
/// included, or nothing. positions: host [natoms, 3] Å; cell: host [9] (rows are the cell
/// vectors) or nullptr without periodic directions. O(natoms): a neighbour list with the overlap
/// distance as its cutoff (its bins grow for sparse systems, so memory stays linear).
/// Thread-safe: it holds data::kokkos_mutex() (the caller must not).
std::optional<Overlap> find_overlap(const double* positions, int64_t natoms, const double* cell,
                                    std::array<bool, 3> pbc);

/// The closest pair of a neighbour list closer than `threshold` Å, or nothing: a scan over the
/// list's pairs (where the list lives), for a caller that built the list anyway (MD). Launches
/// a Kokkos kernel: a caller on several threads holds data::kokkos_mutex().
template <typename Real>
std::optional<Overlap> find_overlap(const NeighborList<Real>& list, double threshold = kOverlapDistance);

extern template std::optional<Overlap> find_overlap<float>(const NeighborList<float>&, double);
extern template std::optional<Overlap> find_overlap<double>(const NeighborList<double>&, double);

}  // namespace mlip::data
