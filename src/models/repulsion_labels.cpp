#include "models/repulsion_labels.h"

#include <mutex>

#include "data/kokkos_runtime.h"
#include "data/neighbor_list.h"
#include "models/pair_list.h"
#include "models/repulsion_inference.h"

namespace mlip::models {

RepulsionLabels::RepulsionLabels(const PairRepulsionSettings& settings, const std::vector<std::string>& type_map)
    : zbl_(settings, type_map) {}

RepulsionLabels::Terms RepulsionLabels::terms(const data::System& system, const data::Frame& frame) const {
  const int64_t natoms = system.natoms();
  PairList pairs;
  {
    // One build at a time: Kokkos is shared with the models' frame making (data/kokkos_runtime.h).
    std::lock_guard<std::mutex> lock(data::kokkos_mutex());
    pairs = pair_list(
        data::build_neighbor_list<double>(frame.coord.data(), natoms, frame.cell(), system.pbc, zbl_.outer()));
  }
  const torch::Tensor centre = pairs.centre.contiguous(), neighbour = pairs.neighbor.contiguous();
  const torch::Tensor vectors = pairs.vector.to(torch::kFloat64).contiguous();
  const std::vector<int64_t> types(system.types.begin(), system.types.end());
  AtomGraph graph;
  graph.nodes = natoms;
  graph.nlocal = natoms;
  graph.types = types.data();
  graph.npairs = pairs.npairs();
  graph.centre = centre.data_ptr<int64_t>();
  graph.neighbour = neighbour.data_ptr<int64_t>();
  graph.vectors = vectors.data_ptr<double>();
  Request request;
  request.graph = &graph;
  InferenceResult sums;
  sums.forces.assign(size_t(natoms * 3), 0.0);
  add_pair_repulsion(zbl_, request, sums);
  Terms out;
  out.energy = sums.energy;
  out.forces = std::move(sums.forces);
  out.virial.assign(sums.virial.begin(), sums.virial.end());
  return out;
}

void RepulsionLabels::subtract(const data::System& system, data::Frame& frame) const {
  const Terms t = terms(system, frame);
  if (!frame.energy.empty()) frame.energy[0] -= t.energy;
  if (!frame.force.empty())
    for (size_t k = 0; k < frame.force.size(); ++k) frame.force[k] -= t.forces[k];
  if (!frame.virial.empty())
    for (size_t k = 0; k < 9; ++k) frame.virial[k] -= t.virial[k];
}

std::shared_ptr<const RepulsionLabels> repulsion_labels(const PairRepulsionSettings& settings,
                                                        const std::vector<std::string>& type_map) {
  if (!settings.enabled()) return nullptr;
  return std::make_shared<RepulsionLabels>(settings, type_map);
}

}  // namespace mlip::models
