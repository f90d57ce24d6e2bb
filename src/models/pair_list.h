#pragma once

#include <torch/script.h>

#include "data/neighbor_list.h"

namespace mlip::models {

/// A neighbour list as host (CPU) LibTorch tensors: the one place where a list built by the
/// Kokkos kernels (whose Views may live in device memory) is copied to the host, once, for code
/// that reads it pair by pair (the trainer's edges, the tester's deploy input, test helpers).
/// Pair p has centre `centre[p]`, neighbour `neighbor[p]`; the pairs of one centre are
/// contiguous and centres come in increasing order.
struct PairList {
  torch::Tensor centre;    ///< [P] int64, index i of the centre atom
  torch::Tensor neighbor;  ///< [P] int64, index j of the neighbour atom
  torch::Tensor shift;     ///< [P, 3] float64, integer cell shift s (d_ij = r_j - r_i + s · cell)
  torch::Tensor vector;    ///< [P, 3] float64 or float32 (the list's Real), pair vector d_ij, Å

  int64_t npairs() const { return centre.defined() ? centre.size(0) : 0; }
  /// [2, P] int64: rows centre and neighbour (the deploy interface's edge_index).
  torch::Tensor edge_index() const { return torch::stack({centre, neighbor}); }
};

/// Copies `nl` to the host once and returns it as tensors (see PairList).
template <typename Real>
PairList pair_list(const data::NeighborList<Real>& nl);

extern template PairList pair_list<float>(const data::NeighborList<float>&);
extern template PairList pair_list<double>(const data::NeighborList<double>&);

}  // namespace mlip::models
