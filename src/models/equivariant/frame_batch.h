#pragma once

#include <torch/script.h>

#include <cstdint>
#include <vector>

#include "models/model.h"

namespace mlip::models {

/// What the equivariant training path caches of one frame (docs/equivariant.md "The training
/// path"): the pairs within r_max, their geometry and its derivatives with respect to the pair
/// vectors. E edges (both directions of every pair), Q distinct pairs (about E / 2).
struct EquivariantFrame : FrameInput {
  torch::Tensor d;  ///< [E, 3] model dtype, d_e = r_j - r_i + shift·cell, Å
  // Index tables on the host (a batch's are concatenated there and moved to the device once).
  torch::Tensor i, j;            ///< [E] int64 host, centre and neighbour (centres non-decreasing)
  torch::Tensor pair;            ///< [E] int64 host, the pair of edge e
  torch::Tensor pair_edge;       ///< [Q] int64 host, the edge whose vector the pair's basis is taken from
  torch::Tensor basis;           ///< [Q, num_bessels] model dtype, Bessel basis times cutoff
  torch::Tensor basis_jacobian;  ///< [Q, num_bessels, 3] its derivative by d of pair_edge, 1/Å
  torch::Tensor y;               ///< [E, (l_max+1)^2] model dtype, edge harmonics
  torch::Tensor y_jacobian;      ///< [E, (l_max+1)^2, 3] their derivative by d_e, 1/Å
  /// host: the contraction's edge tables [i, j, centre_offsets, by_neighbor, neighbor_offsets]
  /// (models/equivariant/message_contraction.h).
  std::vector<torch::Tensor> edges;
  // With model.long_range only (undefined otherwise; docs/long_range.md "Training"):
  torch::Tensor pos;   ///< [N, 3] float64 on the device, the positions, Å
  torch::Tensor cell;  ///< [3, 3] float64 on the device, rows the cell vectors, Å; zeros: no periodicity
  bool periodic = false;  ///< host: the frame is periodic (its cell is read), known without reading the device
  int64_t bytes() const override;
};

/// A batch's frames as one graph, on the model's device (docs/equivariant.md "A batch in one
/// call"): frame f's atoms are f·N .. f·N+N-1, its edge, pair and table indices offset by the
/// edges and pairs of the frames before it. E and Q count the whole batch's edges and pairs
/// (padding included). Fields as in EquivariantFrame, then:
struct FrameBatch {
  torch::Tensor d, i, j, pair, pair_edge, basis, basis_jacobian, y, y_jacobian;
  torch::Tensor atype;       ///< [B·N] int64, the type of every atom (set by the model)
  torch::Tensor edge_frame;  ///< [E] int64, the frame of each edge
  /// The contraction's tables [i, j, centre_offsets [B·N+1], by_neighbor, neighbor_offsets
  /// [B·N+1], pair, pair_edge] (models/equivariant/message_contraction.h).
  std::vector<torch::Tensor> edges;
  /// With model.long_range only: [B·N, 3] positions and [B, 3, 3] cells, as in EquivariantFrame,
  /// and [B] whether each frame is periodic (host).
  torch::Tensor pos, cell;
  std::vector<bool> periodic;
};

/// The batch's tensors in one list (what Model::pack gives): d, i, j, pair, pair_edge, basis,
/// basis_jacobian, y, y_jacobian, atype, edge_frame, then the tables centre_offsets, by_neighbor,
/// neighbor_offsets; batch_from() is the inverse.
std::vector<torch::Tensor> tensors_of(const FrameBatch& batch);
FrameBatch batch_from(const std::vector<torch::Tensor>& tensors);

/// One frame as a batch: its tensors as they are, its tables moved to `device`.
FrameBatch single_frame_batch(const EquivariantFrame& frame, torch::Device device);
/// Frames of one system (`natoms` atoms each) as one graph on `device`; the tables are
/// concatenated on the host and moved once.
FrameBatch frame_batch(const std::vector<const EquivariantFrame*>& frames, int64_t natoms, torch::Device device);

/// The sizes a batch of `edges` edges and `pairs` pairs is padded to (docs/device.md "Static
/// shapes"): bucket sizes (models/bucket.h) of at least two edges and one pair more, so that
/// every padded edge has a padded pair.
struct PaddedSizes {
  int64_t edges, pairs;
};
PaddedSizes padded_sizes(int64_t edges, int64_t pairs);

/// Pads `batch` (of `nframes` frames, `natoms` atoms in all) to padded_sizes. The padded edges
/// join the last atom to itself (centres stay non-decreasing, and they come last in its
/// neighbour order) with zero vector, harmonics and derivatives; the padded pairs have a zero
/// radial basis, so their radial weights are zero (the radial MLP has no biases) and so is
/// everything a padded edge adds: to the messages, the forces, the virial, and every parameter
/// gradient of either order. Real rows are summed in the same order as without padding.
void pad_to_buckets(FrameBatch& batch, int64_t nframes, int64_t natoms);

}  // namespace mlip::models
