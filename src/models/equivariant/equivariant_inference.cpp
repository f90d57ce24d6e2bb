#include "models/equivariant/equivariant_inference.h"

#include <torch/csrc/autograd/autograd.h>

#include <string>

#include "error.h"
#include "models/equivariant/equivariant_model.h"
#include "models/equivariant/training_function.h"

namespace mlip::models {
namespace {

/// A host tensor copied from `n` values at `data` (from_blob does not own or copy).
template <typename T>
torch::Tensor copied(const T* data, std::vector<int64_t> shape, torch::Dtype dtype) {
  if (shape[0] == 0) return torch::empty(shape, dtype);
  return torch::from_blob(const_cast<T*>(data), shape, dtype).clone();
}

/// Each edge's pair (docs/equivariant.md "Inference in MD"): an edge (i, j, d) and its reverse
/// (j, i, -d), where j is a centre too, are one pair, whose radial basis (a function of |d| only)
/// is computed once, from the first of the two. pair: [E] the pair of each edge; pair_edge: [Q]
/// the edge each pair's basis is taken from.
void pair_edges(const AtomGraph& g, std::vector<int64_t>& pair, std::vector<int64_t>& pair_edge) {
  const int64_t e_count = g.npairs;
  std::vector<int64_t> offsets(size_t(g.nodes) + 1, 0);  // edges of centre c: [offsets[c], offsets[c + 1])
  for (int64_t e = 0; e < e_count; ++e) ++offsets[size_t(g.centre[e]) + 1];
  for (int64_t c = 0; c < g.nodes; ++c) offsets[size_t(c) + 1] += offsets[size_t(c)];
  pair.assign(size_t(e_count), -1);
  pair_edge.clear();
  pair_edge.reserve(size_t(e_count) / 2 + 1);
  const double* d = g.vectors;
  for (int64_t e = 0; e < e_count; ++e) {
    if (pair[size_t(e)] >= 0) continue;
    const int64_t q = int64_t(pair_edge.size());
    pair[size_t(e)] = q;
    pair_edge.push_back(e);
    const int64_t i = g.centre[e], j = g.neighbour[e];
    for (int64_t r = offsets[size_t(j)]; r < offsets[size_t(j) + 1]; ++r) {
      if (r == e || pair[size_t(r)] >= 0 || g.neighbour[r] != i) continue;
      // The reverse has the opposite vector (to round-off: distinct images differ by a box length).
      const double dx = d[r * 3] + d[e * 3], dy = d[r * 3 + 1] + d[e * 3 + 1], dz = d[r * 3 + 2] + d[e * 3 + 2];
      if (dx * dx + dy * dy + dz * dz < 1e-16) {
        pair[size_t(r)] = q;
        break;
      }
    }
  }
}

class EquivariantInference : public Inference {
 public:
  EquivariantInference(const EquivariantConfig& config, torch::jit::Module& module)
      : config_(config), module_(module), training_(config, true) {
    params_ = training_.parameters(module_, true);
    avg_num_neighbors_ = module_.attr("avg_num_neighbors").toDouble();
  }

  std::string describe() const override { return "equivariant inference through the training path's contraction"; }
  double cutoff() const override { return config_.r_max; }
  InferenceInput input() const override { return InferenceInput::kGraph; }

  InferenceResult evaluate(const data::NeighborList<float>&, const std::vector<int>&, int64_t, int64_t, bool,
                           bool) override {
    throw Error(describe() + ": evaluates a graph of atoms, not a neighbour list");
  }
  InferenceResult evaluate(const data::NeighborList<double>&, const std::vector<int>&, int64_t, int64_t, bool,
                           bool) override {
    throw Error(describe() + ": evaluates a graph of atoms, not a neighbour list");
  }

  InferenceResult evaluate(const AtomGraph& graph, bool atomic, bool pair_gradient) override {
    const int64_t n = graph.nodes, e = graph.npairs;
    const torch::Tensor d64 = copied(graph.vectors, {e, 3}, torch::kFloat64);
    const torch::Tensor i = copied(graph.centre, {e}, torch::kInt64);
    const torch::Tensor j = copied(graph.neighbour, {e}, torch::kInt64);
    const torch::Tensor atype = copied(graph.types, {n}, torch::kInt64);
    torch::Tensor owned, grad;
    {
      torch::AutoGradMode grad_mode(true);
      const torch::Tensor d = d64.to(config_.dtype()).requires_grad_(true);
      // The geometry by the frozen module's own edge_geometry: the harmonics of every edge, the
      // radial basis of every pair (the radial MLP, most of the work, then runs once a pair).
      std::vector<int64_t> pair_of, pair_edge;
      pair_edges(graph, pair_of, pair_edge);
      const torch::Tensor pair = torch::tensor(pair_of, torch::kInt64);
      const torch::Tensor first_edge = torch::tensor(pair_edge, torch::kInt64);
      torch::jit::Method geometry = module_.get_method("edge_geometry");
      const torch::Tensor y = geometry({d}).toTuple()->elements()[1].toTensor();
      const torch::Tensor pair_vectors = d.index_select(0, first_edge);
      const torch::Tensor basis = geometry({pair_vectors}).toTuple()->elements()[0].toTensor();
      // The contraction reads each edge's radial weights through its pair: no [E, P, f] copy.
      std::vector<torch::Tensor> tables = TrainingFunction::edge_tables(i, j, n);
      tables.push_back(pair);
      tables.push_back(first_edge);
      const torch::Tensor energies = training_.energy(params_, avg_num_neighbors_, basis, pair, y, i, j, atype, tables);
      owned = energies.narrow(0, 0, graph.nlocal);
      if (e > 0) grad = torch::autograd::grad({owned.sum()}, {d}, {}, false, false, true)[0];
    }
    InferenceResult out;
    const torch::Tensor owned64 = owned.detach().to(torch::kFloat64).contiguous();
    out.energy = owned64.sum().item<double>();
    if (atomic) out.atomic.assign(owned64.data_ptr<double>(), owned64.data_ptr<double>() + graph.nlocal);
    out.forces.assign(size_t(n) * 3, 0.0);
    if (!grad.defined()) return out;  // no pairs (or none that matter): no forces, no virial
    const torch::Tensor g = grad.to(torch::kFloat64).contiguous();
    // d_ij = r_j - r_i: F_i = sum_j dE/dd_ij, F_j -= dE/dd_ij; W = -sum d ⊗ dE/dd.
    const torch::Tensor forces = torch::zeros({n, 3}, torch::kFloat64).index_add_(0, i, g).index_add_(0, j, -g);
    std::copy(forces.data_ptr<double>(), forces.data_ptr<double>() + n * 3, out.forces.begin());
    const torch::Tensor virial = (-d64.t().matmul(g)).contiguous();
    std::copy(virial.data_ptr<double>(), virial.data_ptr<double>() + 9, out.virial.begin());
    if (pair_gradient) out.pair_gradient.assign(g.data_ptr<double>(), g.data_ptr<double>() + e * 3);
    return out;
  }

 private:
  EquivariantConfig config_;
  torch::jit::Module module_;
  TrainingFunction training_;
  c10::Dict<std::string, torch::Tensor> params_;
  double avg_num_neighbors_ = 1.0;
};

}  // namespace

std::unique_ptr<Inference> make_equivariant_inference(const ModelSettings& settings, torch::jit::Module& module) {
  const auto* equivariant = dynamic_cast<const EquivariantSettings*>(&settings);
  if (equivariant == nullptr) throw Error("make_equivariant_inference: the settings are not an equivariant model's");
  return std::make_unique<EquivariantInference>(equivariant->config, module);
}

}  // namespace mlip::models
