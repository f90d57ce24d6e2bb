#pragma once

#include <torch/script.h>

#include <cstdint>
#include <optional>

namespace mlip::md {

/// An MD rank's graph (docs/lammps.md "The graph of a rank") built on a torch device from the
/// rank's atoms with tensor operations only: a cell list, the candidate pairs of each centre in
/// the 27 cells around it, and the folding of ghosts by id (docs/lammps.md "Pairs on the
/// device"). Every tensor lives on the device of the positions given to build_device_graph.
struct DeviceGraph {
  int64_t nodes = 0;          ///< distinct atoms; nodes [0, nlocal) are the owned atoms, in row order
  int64_t npairs = 0;         ///< directed pairs (i, j) with i within layers - 1 hops of an owned atom
  torch::Tensor row_of_node;  ///< [nodes] int64: the atom row standing for each node (its lowest row)
  torch::Tensor centre;       ///< [npairs] int64 node i, non-decreasing
  torch::Tensor neighbour;    ///< [npairs] int64 node j
  /// [npairs, 3] float64, Å: x[row of j in the pair] - x[row_of_node[j]] (zero unless the pair
  /// reaches j through a ghost folded onto it), so d_ij = x[j] - x[i] + shift.
  torch::Tensor shift;
};

/// Two atom rows closer than the overlap distance (data/overlap.h), for the caller's message.
struct DeviceOverlap {
  int64_t row_i = 0, row_j = 0;  ///< the two rows
  double distance = 0;           ///< Å
};

/// The graph of atom rows [0, natoms) with the owned atoms [0, nlocal) first.
///   positions: [natoms, 3] float64, Å, every position imaged (pair vectors are differences)
///   ids: [natoms] int64 global ids (LAMMPS' tags), or an undefined tensor: every row its own atom;
///        with ids, ghosts imaging an atom already present are folded onto its node; the owned
///        atoms' ids must be distinct (an mlip::Error otherwise)
///   layers: message-passing layers L: centres are the nodes within L - 1 hops of an owned atom
///   r_max: the pair cutoff, Å: pairs with |d_ij| < r_max
/// overlap: set to the closest pair when two atoms are closer than data::kOverlapDistance (the
/// graph is then still returned). Reads a few values from the device: the bounding box, the
/// fullest cell, the pair counts (through nonzero) and the closest pair.
DeviceGraph build_device_graph(const torch::Tensor& positions, const torch::Tensor& ids, int64_t nlocal,
                               int64_t layers, double r_max, std::optional<DeviceOverlap>& overlap);

}  // namespace mlip::md
