#include "models/equivariant/equivariant_inference.h"

#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <string>

#include "error.h"
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

/// Gradients of `outputs` (with `grad_outputs`) by `inputs`, zeros for an input they do not
/// depend on (or when none of them needs a gradient: a rank without atoms or pairs).
std::vector<torch::Tensor> gradients(const std::vector<torch::Tensor>& outputs,
                                     const std::vector<torch::Tensor>& grad_outputs,
                                     const std::vector<torch::Tensor>& inputs) {
  std::vector<torch::Tensor> outs, grads;
  for (size_t k = 0; k < outputs.size(); ++k)
    if (outputs[k].requires_grad()) outs.push_back(outputs[k]), grads.push_back(grad_outputs[k]);
  std::vector<torch::Tensor> result(inputs.size());
  if (!outs.empty()) result = torch::autograd::grad(outs, inputs, grads, false, false, true);
  for (size_t k = 0; k < inputs.size(); ++k)
    if (!result[k].defined()) result[k] = torch::zeros_like(inputs[k]);
  return result;
}

/// The pieces of a graph every evaluation starts from: the pair vectors, the edges' harmonics
/// and the pairs' radial basis as functions of them, and the contraction's edge tables.
struct GraphGeometry {
  torch::Tensor d64;    ///< [E, 3] float64 pair vectors
  torch::Tensor d;      ///< [E, 3] model dtype, requires grad
  torch::Tensor i, j;   ///< [E] int64 centres, neighbours
  torch::Tensor atype;  ///< [N] int64
  torch::Tensor pair;   ///< [E] int64 the pair of each edge
  torch::Tensor basis;  ///< [Q, num_bessels] radial basis of each pair, a function of d
  torch::Tensor y;      ///< [E, (l_max+1)^2] harmonics of each edge, a function of d
  std::vector<torch::Tensor> tables;  ///< the message contraction's tables, pair and pair_edge included
};

class EquivariantInference : public Inference {
 public:
  EquivariantInference(const EquivariantConfig& config, torch::jit::Module& module)
      : config_(config), module_(module), training_(config, true) {
    params_ = training_.parameters(module_, true);
    avg_num_neighbors_ = module_.attr("avg_num_neighbors").toDouble();
    layer_outputs_ = equivariant_layer_outputs(config_);
  }

  std::string describe() const override { return "equivariant inference through the training path's contraction"; }
  double cutoff() const override { return config_.r_max; }
  InferenceInputs inputs() const override {
    InferenceInputs in;
    in.graph = true;
    for (const auto& sizes : layer_outputs_) in.exchange_width = std::max(in.exchange_width, width(sizes));
    in.charges = config_.long_range.enabled;
    return in;
  }

  InferenceResult evaluate(const Request& request) override {
    if (request.graph == nullptr || request.neighbors != nullptr) refuse(request);
    check_charge_coupling(request);
    const bool atomic = request.outputs.atomic_energy, pair_gradient = request.outputs.pair_gradient;
    InferenceResult out =
        request.exchange != nullptr
            ? evaluate_exchanged(*request.graph, *request.exchange, request.charge_coupling, atomic, pair_gradient)
            : evaluate_graph(*request.graph, request.charge_coupling, atomic, pair_gradient);
    if (!request.outputs.charges) out.charges.clear();
    return out;
  }

 private:
  /// With charges: the owned atoms' raw charges (column 1 of `owned` [nlocal, 2]) through the
  /// coupling; returns the backward pass's seed of `owned` ([nlocal, 2]: 1 for each energy, the
  /// coupling's gradient for each charge) and keeps the raw charges in `raw`.
  torch::Tensor charge_seed(const torch::Tensor& owned, ChargeCoupling& coupling, std::vector<double>& raw) const {
    const int64_t nlocal = owned.size(0);
    const torch::Tensor q = owned.select(1, 1).detach().to(torch::kFloat64).contiguous();
    raw.assign(q.data_ptr<double>(), q.data_ptr<double>() + nlocal);
    std::vector<double> gradient(size_t(nlocal), 0.0);
    coupling.couple(raw.data(), nlocal, gradient.data());
    const torch::Tensor g = torch::tensor(gradient, torch::kFloat64).to(owned.scalar_type());
    return torch::stack({torch::ones({nlocal}, owned.options().requires_grad(false)), g}, 1);
  }

  /// The whole graph at once: every node's features computed here.
  InferenceResult evaluate_graph(const AtomGraph& graph, ChargeCoupling* coupling, bool atomic, bool pair_gradient) {
    torch::Tensor owned, grad;
    std::vector<double> raw;
    GraphGeometry g;
    {
      torch::AutoGradMode grad_mode(true);
      g = geometry(graph);
      const torch::Tensor energies =
          training_.energy(params_, avg_num_neighbors_, g.basis, g.pair, g.y, g.i, g.j, g.atype, g.tables);
      owned = energies.narrow(0, 0, graph.nlocal);
      // The coupling is collective: every rank calls it, with or without pairs.
      const torch::Tensor seed = coupling != nullptr ? charge_seed(owned, *coupling, raw) : torch::ones_like(owned);
      if (graph.npairs > 0 && owned.requires_grad())
        grad = torch::autograd::grad({owned}, {g.d}, {seed}, false, false, true)[0];
      if (coupling != nullptr) owned = owned.select(1, 0);
    }
    InferenceResult out = result(graph, g, owned.detach(), grad, atomic, pair_gradient);
    out.charges = std::move(raw);
    return out;
  }

  // The layers one at a time, the ghosts' features from their owners between them, and the
  // backward pass through them in reverse with the ghosts' gradients returned to their owners
  // (docs/equivariant.md "Features exchanged between ranks").
  InferenceResult evaluate_exchanged(const AtomGraph& graph, GhostExchange& exchange, ChargeCoupling* coupling,
                                     bool atomic, bool pair_gradient) {
    const int64_t n = graph.nodes, nlocal = graph.nlocal;
    const int64_t blocks = int64_t(layer_outputs_.size()) + 1;
    torch::Tensor owned, grad;
    std::vector<double> raw;
    GraphGeometry g;
    {
      torch::AutoGradMode grad_mode(true);
      g = geometry(graph);
      // Each block's graph starts from leaves: the geometry and its input features.
      const torch::Tensor basis = g.basis.detach().requires_grad_(true), y = g.y.detach().requires_grad_(true);
      const size_t count = size_t(blocks);
      std::vector<torch::Tensor> inputs(count), energies(count), outputs(count);
      std::vector<torch::Tensor> x;  // block k's input features of every node (none for block 0)
      for (int64_t k = 0; k < blocks; ++k) {
        auto [energy, out] =
            training_.layer(k, params_, avg_num_neighbors_, basis, g.pair, y, g.atype, g.tables, nlocal, x);
        energies[size_t(k)] = energy;
        // The last block's energies with charges: [nlocal, 2], the raw charges in column 1.
        const torch::Tensor energy_part = energy.dim() == 2 ? energy.select(1, 0) : energy;
        owned = k == 0 ? energy_part.detach() : owned + energy_part.detach();
        if (k + 1 == blocks) break;
        const auto& sizes = layer_outputs_[size_t(k)];
        std::vector<torch::Tensor> flat;
        for (size_t q = 0; q < sizes.size(); ++q) flat.push_back(out[q].reshape({nlocal, config_.num_features * sizes[q]}));
        outputs[size_t(k)] = torch::cat(flat, 1);
        const int64_t w = width(sizes);
        torch::Tensor rows = torch::zeros({n, w}, torch::kFloat64);
        rows.narrow(0, 0, nlocal).copy_(outputs[size_t(k)].detach());
        exchange.forward(rows.data_ptr<double>(), w);
        inputs[size_t(k + 1)] = rows.to(config_.dtype()).requires_grad_(true);
        x = split(inputs[size_t(k + 1)], sizes);
      }
      // The last block's seed: 1 for each energy, and with charges the coupling's gradient for
      // each raw charge (collective: every rank calls it here).
      const torch::Tensor& last = energies.back();
      const torch::Tensor last_seed =
          coupling != nullptr ? charge_seed(last, *coupling, raw) : torch::ones_like(last).detach();
      torch::Tensor grad_basis = torch::zeros_like(basis), grad_y = torch::zeros_like(y);
      torch::Tensor grad_out;  // dE/d(block k's output features of the owned atoms), all ranks' E
      for (int64_t k = blocks - 1; k >= 0; --k) {
        // Built with reserve, not from one-element lists: GCC 12 otherwise warns, wrongly, that the
        // second push_back reads past the list (-Warray-bounds).
        std::vector<torch::Tensor> outs, grad_outs;
        outs.reserve(2), grad_outs.reserve(2);
        if (k + 1 == blocks) outs.push_back(energies[size_t(k)]), grad_outs.push_back(last_seed);
        else outs.push_back(energies[size_t(k)].sum()), grad_outs.push_back(torch::ones({}, basis.options()));
        if (k + 1 < blocks) outs.push_back(outputs[size_t(k)]), grad_outs.push_back(grad_out);
        std::vector<torch::Tensor> by = {basis, y};
        if (k > 0) by.push_back(inputs[size_t(k)]);
        const auto grads = gradients(outs, grad_outs, by);
        grad_basis += grads[0];
        grad_y += grads[1];
        if (k == 0) break;
        torch::Tensor rows = grads[2].to(torch::kFloat64).contiguous().clone();
        exchange.reverse(rows.data_ptr<double>(), rows.size(1));
        grad_out = rows.narrow(0, 0, nlocal).to(config_.dtype());
      }
      if (graph.npairs > 0) grad = torch::autograd::grad({g.basis, g.y}, {g.d}, {grad_basis, grad_y}, false, false, true)[0];
    }
    InferenceResult out = result(graph, g, owned, grad, atomic, pair_gradient);
    out.charges = std::move(raw);
    return out;
  }

  int64_t width(const std::vector<int64_t>& sizes) const {
    int64_t w = 0;
    for (int64_t s : sizes) w += config_.num_features * s;
    return w;
  }

  /// The columns of `rows` [N, width] as one [N, 2l+1, f] tensor per irrep (views; the training
  /// function's channels-last layout).
  std::vector<torch::Tensor> split(const torch::Tensor& rows, const std::vector<int64_t>& sizes) const {
    std::vector<torch::Tensor> x;
    int64_t column = 0;
    for (int64_t s : sizes) {
      x.push_back(rows.narrow(1, column, config_.num_features * s).reshape({rows.size(0), s, config_.num_features}));
      column += config_.num_features * s;
    }
    return x;
  }

  /// The geometry by the frozen module's own edge_geometry: the harmonics of every edge, the
  /// radial basis of every pair (the radial MLP, most of the work, then runs once a pair).
  /// Call with autograd on.
  GraphGeometry geometry(const AtomGraph& graph) {
    const int64_t n = graph.nodes, e = graph.npairs;
    GraphGeometry g;
    g.d64 = copied(graph.vectors, {e, 3}, torch::kFloat64);
    g.i = copied(graph.centre, {e}, torch::kInt64);
    g.j = copied(graph.neighbour, {e}, torch::kInt64);
    g.atype = copied(graph.types, {n}, torch::kInt64);
    g.d = g.d64.to(config_.dtype()).requires_grad_(true);
    std::vector<int64_t> pair_of, pair_edge;
    pair_edges(graph, pair_of, pair_edge);
    g.pair = torch::tensor(pair_of, torch::kInt64);
    const torch::Tensor first_edge = torch::tensor(pair_edge, torch::kInt64);
    torch::jit::Method edge_geometry = module_.get_method("edge_geometry");
    g.y = edge_geometry({g.d}).toTuple()->elements()[1].toTensor();
    g.basis = edge_geometry({g.d.index_select(0, first_edge)}).toTuple()->elements()[0].toTensor();
    // The contraction reads each edge's radial weights through its pair: no [E, P, f] copy.
    g.tables = TrainingFunction::edge_tables(g.i, g.j, n);
    g.tables.push_back(g.pair);
    g.tables.push_back(first_edge);
    return g;
  }

  /// The result from the owned atoms' energies [nlocal] and dE/dd [E, 3] (undefined: no pairs).
  InferenceResult result(const AtomGraph& graph, const GraphGeometry& g, const torch::Tensor& owned,
                         const torch::Tensor& grad, bool atomic, bool pair_gradient) const {
    const int64_t n = graph.nodes, e = graph.npairs;
    InferenceResult out;
    const torch::Tensor owned64 = owned.to(torch::kFloat64).contiguous();
    out.energy = owned64.sum().item<double>();
    if (atomic) out.atomic.assign(owned64.data_ptr<double>(), owned64.data_ptr<double>() + graph.nlocal);
    out.forces.assign(size_t(n) * 3, 0.0);
    if (!grad.defined()) return out;  // no pairs (or none that matter): no forces, no virial
    const torch::Tensor gd = grad.to(torch::kFloat64).contiguous();
    // d_ij = r_j - r_i: F_i = sum_j dE/dd_ij, F_j -= dE/dd_ij; W = -sum d ⊗ dE/dd.
    const torch::Tensor forces = torch::zeros({n, 3}, torch::kFloat64).index_add_(0, g.i, gd).index_add_(0, g.j, -gd);
    std::copy(forces.data_ptr<double>(), forces.data_ptr<double>() + n * 3, out.forces.begin());
    const torch::Tensor virial = (-g.d64.t().matmul(gd)).contiguous();
    std::copy(virial.data_ptr<double>(), virial.data_ptr<double>() + 9, out.virial.begin());
    if (pair_gradient) out.pair_gradient.assign(gd.data_ptr<double>(), gd.data_ptr<double>() + e * 3);
    return out;
  }

  EquivariantConfig config_;
  torch::jit::Module module_;
  TrainingFunction training_;
  c10::Dict<std::string, torch::Tensor> params_;
  double avg_num_neighbors_ = 1.0;
  std::vector<std::vector<int64_t>> layer_outputs_;  // equivariant_layer_outputs(config_)
};

/// The record of an equivariant model frozen by mlip 0.1.0: its stored training input's values
/// under that version's keys (model.*), renamed into the record's; absent keys take, when read,
/// the defaults that version applied.
SettingsRecord legacy_equivariant_record(const SettingsRecord& input) {
  SettingsRecord record;
  input.copy_renamed(record, {{"num_features", "num_features"},
                              {"l_max", "l_max"},
                              {"parity", "parity"},
                              {"num_layers", "num_layers"},
                              {"correlation", "correlation"},
                              {"num_bessels", "num_bessels"},
                              {"polynomial_p", "polynomial_p"},
                              {"radial_width", "radial_width"},
                              {"radial_depth", "radial_depth"}});
  record.set_flag("readout_every_layer", input.text("readout", "last") == "every_layer");
  record.set_integer("message_layers", input.integer("num_layers", EquivariantConfig().num_layers));
  return record;
}

}  // namespace

SettingsRecord equivariant_record(const EquivariantConfig& config) {
  SettingsRecord record;
  record.set_integer("num_features", config.num_features);
  record.set_integer("l_max", config.l_max);
  record.set_flag("parity", config.parity);
  record.set_flag("pseudotensors", config.pseudotensors);
  record.set_integer("num_layers", config.num_layers);
  record.set_integer("correlation", config.correlation);
  record.set_flag("readout_every_layer", config.readout_every_layer);
  record.set_integer("num_bessels", config.num_bessels);
  record.set_number("polynomial_p", config.polynomial_p);
  record.set_integer("radial_width", config.radial_width);
  record.set_integer("radial_depth", config.radial_depth);
  return record;
}

EquivariantConfig equivariant_config(const SettingsRecord& record, const torch::jit::Module& module) {
  const EquivariantConfig defaults;
  EquivariantConfig c;
  c.type_map = record.words("type_map", {});
  c.precision = record.text("precision", defaults.precision);
  c.r_max = record.number("cutoff", defaults.r_max);
  c.num_features = record.integer("num_features", defaults.num_features);
  c.l_max = record.integer("l_max", defaults.l_max);
  c.parity = record.flag("parity", defaults.parity);
  // Absent from the records of models frozen before the key: those kept every irrep.
  c.pseudotensors = record.flag("pseudotensors", true);
  c.num_layers = record.integer("num_layers", defaults.num_layers);
  c.correlation = record.integer("correlation", defaults.correlation);
  c.readout_every_layer = record.flag("readout_every_layer", defaults.readout_every_layer);
  c.num_bessels = record.integer("num_bessels", defaults.num_bessels);
  c.polynomial_p = record.number("polynomial_p", defaults.polynomial_p);
  c.radial_width = record.integer("radial_width", defaults.radial_width);
  c.radial_depth = record.integer("radial_depth", defaults.radial_depth);
  c.pair_repulsion = pair_repulsion_from(record);
  c.long_range = long_range_from(record);
  if (module.hasattr("avg_num_neighbors")) c.avg_num_neighbors = module.attr("avg_num_neighbors").toDouble();
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(record.source() + ": " + e.what());
  }
  return c;
}

InferenceEntry equivariant_inference_entry() {
  InferenceEntry e;
  e.type = "equivariant";
  e.legacy_record = legacy_equivariant_record;
  e.read_keys = [](const SettingsRecord& record, const torch::jit::Module& module) {
    return equivariant_record(equivariant_config(record, module));
  };
  e.energy_shift = "shift";
  e.long_range = true;
  e.inference = [](const SettingsRecord& record, torch::jit::Module& module) -> std::unique_ptr<Inference> {
    EquivariantConfig config = equivariant_config(record, module);
    return std::make_unique<EquivariantInference>(std::move(config), module);
  };
  return e;
}

}  // namespace mlip::models
