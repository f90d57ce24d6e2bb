#pragma once
// A data frame as the graph a model's inference evaluates (models/inference.h), shared by
// `mlip test` and `mlip model-devi`.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "data/neighbor_list.h"
#include "data/system.h"
#include "models/inference.h"
#include "models/pair_list.h"

namespace mlip::frozen {

/// A frame's pairs as the graph the TorchScript forward evaluates: its positions, its cell (or
/// none) and each pair's integer cell shift.
struct FrameGraph {
  std::vector<int64_t> centre, neighbour;  ///< [npairs] atom indices
  std::vector<int64_t> types;              ///< [natoms] the system's types, int64
  models::PairList pairs;                  ///< the pairs within the cutoff (their shifts)
  std::array<bool, 3> pbc{};               ///< the system's periodicity (all false without a cell)
  models::AtomGraph graph;                 ///< points into these and the frame
};

/// Fills `out` with the pairs of `frame` (of system `sys`) within `cutoff` Å, built by `builder`.
/// `frame` must outlive the use of out.graph (its positions and cell are pointed at).
void make_frame_graph(const data::System& sys, const data::Frame& frame, double cutoff,
                      data::NeighborListBuilder<double>& builder, FrameGraph& out);

/// Throws mlip::Error "<what>: system <name>: frame <f>: the model's prediction is not finite
/// (energy ...)" unless the energy, every force and the virial of `out` are finite: nothing is
/// reported from a prediction that is NaN or Inf.
void check_finite_prediction(const std::string& what, const data::System& sys, int64_t frame,
                             const models::InferenceResult& out);

}  // namespace mlip::frozen
