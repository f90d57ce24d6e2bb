#include "frozen/frame_graph.h"

#include <cmath>

#include "error.h"

namespace mlip::frozen {

void make_frame_graph(const data::System& sys, const data::Frame& frame, double cutoff,
                      data::NeighborListBuilder<double>& builder, FrameGraph& out) {
  out.pairs = models::pair_list(builder.build(frame.coord.data(), sys.natoms(), frame.cell(), sys.pbc, cutoff));
  const int64_t npairs = out.pairs.npairs();
  out.centre.assign(out.pairs.centre.data_ptr<int64_t>(), out.pairs.centre.data_ptr<int64_t>() + npairs);
  out.neighbour.assign(out.pairs.neighbor.data_ptr<int64_t>(), out.pairs.neighbor.data_ptr<int64_t>() + npairs);
  out.types.assign(sys.types.begin(), sys.types.end());
  models::AtomGraph& g = out.graph;
  g = models::AtomGraph();
  g.nodes = sys.natoms();
  g.nlocal = g.nodes;
  g.types = out.types.data();
  g.npairs = npairs;
  g.centre = out.centre.data();
  g.neighbour = out.neighbour.data();
  g.positions = frame.coord.data();
  // A frame without a cell has no periodic images: a zero cell and no shifts.
  static const double kNoCell[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
  g.cell = frame.cell() != nullptr ? frame.box.data() : kNoCell;
  if (frame.cell() != nullptr) g.shifts = out.pairs.shift.data_ptr<double>();
  out.pbc = frame.cell() != nullptr ? sys.pbc : std::array<bool, 3>{{false, false, false}};
  g.pbc = out.pbc.data();
}

void check_finite_prediction(const std::string& what, const data::System& sys, int64_t frame,
                             const models::InferenceResult& out) {
  bool finite = std::isfinite(out.energy);
  for (double v : out.forces) finite = finite && std::isfinite(v);
  for (double v : out.virial) finite = finite && std::isfinite(v);
  if (finite) return;
  throw Error(what + ": system " + sys.name + ": frame " + std::to_string(frame) +
              ": the model's prediction is not finite (energy " +
              (std::isnan(out.energy) ? std::string("NaN") : std::to_string(out.energy)) +
              "); nothing is reported from a prediction that is NaN or Inf");
}

}  // namespace mlip::frozen
