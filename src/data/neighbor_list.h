#pragma once

#include <Kokkos_Core.hpp>
#include <array>
#include <cstdint>

namespace mlip::data {

/// A full neighbour list (both i->j and j->i) in compressed-row form, in Kokkos Views of the
/// default memory space. Pair p belongs to centre i for offsets(i) <= p < offsets(i+1); the
/// order of the neighbours of one centre is unspecified. Memory: 8 bytes per atom plus
/// 4 + 6 + 4*sizeof(Real) bytes per pair (42 for double, 26 for float).
template <typename Real>
struct NeighborList {
  /// [natoms + 1] start of each centre's neighbours; offsets(natoms) = number of pairs.
  Kokkos::View<int64_t*> offsets;
  /// [npairs] index j of the neighbour atom (an index into the input positions).
  Kokkos::View<int32_t*> neighbor;
  /// [npairs, 3] integer cell shift s: d_ij = r_j - r_i + s * cell (s[k] multiplies the k-th
  /// cell vector; 0 in non-periodic directions).
  Kokkos::View<int16_t* [3]> shift;
  /// [npairs, 3] pair vector d_ij, Å.
  Kokkos::View<Real* [3]> vector;
  /// [npairs] |d_ij| < cutoff, Å.
  Kokkos::View<Real*> distance;
  /// Number of centres (the atoms with neighbours; all atoms unless built with `centres`).
  int64_t natoms = 0;
  double cutoff = 0.0;

  int64_t npairs() const { return distance.extent_int(0) == 0 ? 0 : int64_t(distance.extent(0)); }
};

/// Tuning knobs of the cell-list build; the defaults suit the benchmarks in bench/.
struct NeighborListOptions {
  /// Bins per cutoff length (bins are cutoff/k thick, the stencil reaches k bins each way);
  /// 0 picks k from the density.
  int bins_per_cutoff = 0;
};

/// Builds neighbour lists again and again (an MD loop, a trainer) while keeping its buffers:
/// after the first build, a build of a similar system allocates nothing (buffers grow by 1/8
/// when needed). The Views of a returned list share the builder's buffers: they stay valid
/// (reference-counted) but are overwritten by the builder's next build.
template <typename Real>
class NeighborListBuilder {
 public:
  explicit NeighborListBuilder(const NeighborListOptions& options = {});
  /// Same contract as build_neighbor_list below. With 0 <= centres < natoms, only atoms
  /// [0, centres) get neighbours (all natoms atoms can be neighbours) and the list's natoms is
  /// `centres`: an MD rank's owned atoms among its owned + ghost atoms (docs/lammps.md).
  NeighborList<Real> build(const Real* positions, int64_t natoms, const double* cell,
                           std::array<bool, 3> pbc, double cutoff, int64_t centres = -1);

 private:
  NeighborListOptions options_;
  Kokkos::View<double* [3]> frac_;      // released during each build (peak memory)
  Kokkos::View<int32_t* [3]> wrap_;     // released during each build
  Kokkos::View<int32_t*> bin_of_;       // released during each build
  Kokkos::View<int32_t*> sidx_;
  Kokkos::View<int64_t*> bin_start_, fill_pos_, offsets_;
  Kokkos::View<Real* [3]> spos_;
  Kokkos::View<int32_t* [3]> swrap_;
  Kokkos::View<int32_t*> neighbor_;
  Kokkos::View<int16_t* [3]> shift_;
  Kokkos::View<Real* [3]> vector_;
  Kokkos::View<Real*> distance_;
};

extern template class NeighborListBuilder<float>;
extern template class NeighborListBuilder<double>;

/// Builds the full list of pairs (i, j, shift) with |r_j - r_i + shift * cell| < cutoff, O(N),
/// with a cell list over the (possibly triclinic) cell.
///
/// positions: host pointer to [natoms, 3] Å (any position; periodic directions are wrapped
///   internally and the shifts refer to the positions as given).
/// cell: host pointer to [9] (rows are the cell vectors, Å) or nullptr when no direction is
///   periodic. A cell thinner than the cutoff gives several images of one atom (and of the atom
///   itself, with a non-zero shift). In a non-periodic direction the cell vector may be zero.
/// pbc: periodicity of each cell direction (mixed boundaries, e.g. slabs, are supported).
/// Pairs of an atom with itself at zero shift are excluded. Throws mlip::Error for a cutoff
/// that is not positive, a periodic direction without a (non-singular) cell, or non-finite input.
template <typename Real>
NeighborList<Real> build_neighbor_list(const Real* positions, int64_t natoms, const double* cell,
                                       std::array<bool, 3> pbc, double cutoff,
                                       const NeighborListOptions& options = {});

extern template NeighborList<float> build_neighbor_list<float>(
    const float*, int64_t, const double*, std::array<bool, 3>, double, const NeighborListOptions&);
extern template NeighborList<double> build_neighbor_list<double>(
    const double*, int64_t, const double*, std::array<bool, 3>, double, const NeighborListOptions&);

}  // namespace mlip::data
