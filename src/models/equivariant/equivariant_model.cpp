#include "models/equivariant/equivariant_model.h"

#include <torch/csrc/autograd/autograd.h>

#include <array>
#include <cmath>
#include <map>
#include <iomanip>
#include <ostream>
#include <mutex>
#include <sstream>

#include "data/kokkos_runtime.h"
#include "data/neighbor_list.h"
#include "error.h"
#include "models/energy_bias.h"
#include "models/equivariant/equivariant_inference.h"
#include "models/equivariant/training_function.h"
#include "models/module_device.h"
#include "models/pair_list.h"

namespace mlip::models {

using input::Bound;
using input::Section;

namespace {

std::shared_ptr<ModelSettings> read_equivariant(const Section& m, const std::vector<std::string>& type_map) {
  auto s = std::make_shared<EquivariantSettings>();
  s->type = "equivariant";
  s->type_map = type_map;
  EquivariantConfig& e = s->config;
  e.type_map = type_map;
  e.r_max = m.number("r_max", e.r_max, Bound::kPositive);
  e.num_features = m.integer("num_features", e.num_features);
  e.l_max = m.integer("l_max", e.l_max, Bound::kNonNegative);
  if (e.l_max > 3) input::expected(m.path_of("l_max"), "an integer from 0 to 3", m.get("l_max"));
  e.parity = m.flag("parity", e.parity);
  e.num_layers = m.integer("num_layers", e.num_layers);
  e.correlation = m.integer("correlation", e.correlation);
  e.readout_every_layer = m.choice("readout", "last", {"last", "every_layer"}) == "every_layer";
  if (e.correlation > 3) input::expected(m.path_of("correlation"), "1, 2 or 3", m.get("correlation"));
  e.num_bessels = m.integer("num_bessels", e.num_bessels);
  e.polynomial_p = m.number("polynomial_p", e.polynomial_p, Bound::kPositive);
  if (e.polynomial_p < 2) input::expected(m.path_of("polynomial_p"), "a number >= 2", m.get("polynomial_p"));
  e.radial_width = m.integer("radial_width", e.radial_width);
  e.radial_depth = m.integer("radial_depth", e.radial_depth);
  if (m.has_value("avg_num_neighbors") &&
      !(input::is_scalar(m.get("avg_num_neighbors")) && m.get("avg_num_neighbors").Scalar() == "auto"))
    s->avg_num_neighbors = m.number("avg_num_neighbors", 1.0, Bound::kPositive);
  s->precision = m.choice("precision", s->precision, {"float64", "float32"}, {{"default", "float64"}});
  e.precision = s->precision;
  s->seed = m.seed("seed", s->seed);
  return s;
}

/// What the training path caches of one frame (docs/equivariant.md "The training path"): the
/// pairs within r_max, their geometry and its derivatives with respect to the pair vectors.
/// E edges (both directions of every pair), Q = distinct pairs (about E / 2).
struct EquivariantFrame : FrameInput {
  torch::Tensor d;               ///< [E, 3] model dtype, d_e = r_j - r_i + shift·cell, Å
  torch::Tensor i, j;            ///< [E] int64, centre and neighbour (centres non-decreasing)
  torch::Tensor pair;            ///< [E] int64, the pair of edge e
  torch::Tensor pair_edge;       ///< [Q] int64, the edge whose vector the pair's basis is taken from
  torch::Tensor basis;           ///< [Q, num_bessels] Bessel basis times cutoff
  torch::Tensor basis_jacobian;  ///< [Q, num_bessels, 3] its derivative by d of pair_edge, 1/Å
  torch::Tensor y;               ///< [E, (l_max+1)^2] edge harmonics
  torch::Tensor y_jacobian;      ///< [E, (l_max+1)^2, 3] their derivative by d_e, 1/Å
  std::vector<torch::Tensor> edges;  ///< the contraction's edge tables (models/equivariant/message_contraction.h)
  int64_t bytes() const override {
    int64_t b = 0;
    for (const auto* t : {&d, &i, &j, &pair, &pair_edge, &basis, &basis_jacobian, &y, &y_jacobian}) b += tensor_bytes(*t);
    for (size_t k = 2; k < edges.size(); ++k) b += tensor_bytes(edges[k]);  // edges[0], [1] are i, j
    return b;
  }
};

/// pair[e] and pair_edge[q] of the edges (i, j, shift): an edge and its reverse (j, i, -shift)
/// are one pair, whose basis is taken from the first of the two.
void pair_edges(const PairList& pairs, torch::Tensor& pair, torch::Tensor& pair_edge) {
  const int64_t n = pairs.npairs();
  const auto ci = pairs.centre.accessor<int64_t, 1>();
  const auto nj = pairs.neighbor.accessor<int64_t, 1>();
  const auto sh = pairs.shift.accessor<double, 2>();
  using Key = std::array<int64_t, 5>;
  auto key = [&](int64_t e, int64_t sign) {
    return Key{sign > 0 ? ci[e] : nj[e], sign > 0 ? nj[e] : ci[e], sign * std::llround(sh[e][0]),
               sign * std::llround(sh[e][1]), sign * std::llround(sh[e][2])};
  };
  std::map<Key, int64_t> first;  // key of a pair's first edge -> pair id
  std::vector<int64_t> of(static_cast<size_t>(n)), edge;
  for (int64_t e = 0; e < n; ++e) {
    const auto reverse = first.find(key(e, -1));
    if (reverse != first.end()) {
      of[size_t(e)] = reverse->second;
    } else {
      of[size_t(e)] = int64_t(edge.size());
      first.emplace(key(e, 1), int64_t(edge.size()));
      edge.push_back(e);
    }
  }
  pair = torch::tensor(of, torch::kInt64);
  pair_edge = torch::tensor(edge, torch::kInt64);
}

/// d value / d d_e of a per-edge function value [E, K] of d [E, 3]: [E, K, 3] (one backward
/// pass per column; each row depends on its own edge only).
torch::Tensor per_edge_jacobian(const torch::Tensor& value, const torch::Tensor& d) {
  std::vector<torch::Tensor> columns;
  for (int64_t k = 0; k < value.size(1); ++k)
    columns.push_back(torch::autograd::grad({value.select(1, k).sum()}, {d}, {}, true, false)[0]);
  return torch::stack(columns, 1);
}

class EquivariantModel final : public Model {
 public:
  EquivariantModel(const EquivariantSettings& settings, const ModelContext& context)
      : settings_(settings), device_(context.device) {
    EquivariantConfig& c = settings_.config;
    c.avg_num_neighbors = settings_.avg_num_neighbors.value_or(1.0);
    c.seed = settings_.seed ? *settings_.seed : context.training_seed.value_or(1);
    module_ = build_equivariant(c);
    move_module(module_, device_);  // scale and shift are plain attributes: Module::to leaves them
    training_ = std::make_unique<TrainingFunction>(c);
  }

  torch::jit::Module& module() override { return module_; }
  const ModelSettings& settings() const override { return settings_; }
  torch::Device device() const override { return device_; }

  std::string summary() const override {
    const EquivariantConfig& e = settings_.config;
    std::ostringstream o;
    o << "equivariant, " << settings_.precision << ", r_max " << e.r_max << " Å, l_max " << e.l_max
      << (e.parity ? " with parity" : " (SO(3))") << ", " << e.num_layers << " layers x " << e.num_features
      << " features" << (e.correlation > 1 ? ", correlation " + std::to_string(e.correlation) : std::string())
      << (e.readout_every_layer ? ", readout of every layer" : "");
    return o.str();
  }

  std::unique_ptr<FrameInput> prepare_frame(const data::System& system, const data::Frame& frame) override {
    const PairList pairs = pairs_of(system, frame);
    auto out = std::make_unique<EquivariantFrame>();
    const auto dtype = settings_.dtype();
    out->d = pairs.vector.to(device_, dtype);
    out->i = pairs.centre.to(device_);
    out->j = pairs.neighbor.to(device_);
    torch::Tensor pair, pair_edge;
    pair_edges(pairs, pair, pair_edge);
    out->pair = pair.to(device_);
    out->pair_edge = pair_edge.to(device_);
    {
      // The geometry by the saved model's own edge_geometry, its derivatives by autograd: the
      // training path then never differentiates it (docs/equivariant.md "The training path").
      torch::AutoGradMode grad_mode(true);
      const auto d = out->d.detach().requires_grad_(true);
      const auto geometry = module_.get_method("edge_geometry")({d}).toTuple();
      const auto basis = geometry->elements()[0].toTensor(), y = geometry->elements()[1].toTensor();
      out->basis = basis.detach().index_select(0, out->pair_edge);
      out->basis_jacobian = per_edge_jacobian(basis, d).index_select(0, out->pair_edge);
      out->y = y.detach();
      out->y_jacobian = per_edge_jacobian(y, d);
    }
    out->edges = TrainingFunction::edge_tables(out->i, out->j, system.natoms());
    return out;
  }

  void compute_statistics(const std::vector<StatisticsFrames>& frames, const std::vector<double>& reference_energies,
                          std::ostream& log) override {
    // Per-type shift (least squares), scale = RMS of the force labels of the statistics
    // frames, and the mean number of neighbours within r_max over all frames of the systems
    // (unless given); docs/equivariant.md "Statistics".
    const int ntypes = int(settings_.type_map.size());
    const auto shift = energy_bias(frames, reference_energies, ntypes, "per-type energy shift", log);
    double f2 = 0, nf = 0, pairs = 0, atoms = 0;
    for (const StatisticsFrames& s : frames) {
      const data::System& sys = *s.system;
      for (const data::Frame& frame : s.frames) {
        for (double f : frame.force) f2 += f * f;
        nf += double(frame.force.size());
        if (!settings_.avg_num_neighbors) pairs += double(pairs_of(sys, frame).npairs()), atoms += double(sys.natoms());
      }
    }
    const double scale = nf > 0 && f2 > 0 ? std::sqrt(f2 / nf) : 1.0;
    module_.run_method("set_scale_shift", torch::full({ntypes}, scale, torch::kFloat64).to(device_),
                       shift.to(device_));
    const double avg = settings_.avg_num_neighbors.value_or(atoms > 0 ? pairs / atoms : 1.0);
    module_.setattr("avg_num_neighbors", avg);
    log << "scale " << std::setprecision(6) << scale << " (RMS of the force labels, eV/Å); avg_num_neighbors "
        << avg << (settings_.avg_num_neighbors ? " (given)" : " (from the data)") << "\n";
  }

  Prediction predict(const SystemAtoms& atoms, const std::vector<const FrameInput*>& frames, bool training) override {
    // The training path (docs/equivariant.md "The training path"): the energy from the cached
    // geometry, its gradient with respect to the basis and the harmonics (kept as a graph when
    // training, so that the force loss can be differentiated again), and the forces from the
    // cached derivatives of the geometry. The batch's frames are evaluated as one graph of
    // frames x atoms (docs/equivariant.md "A batch in one call"): one call of the energy
    // function, whatever the batch, instead of one per frame.
    const BatchedFrames b = frames.size() == 1 ? single_frame(atoms, *frames[0]) : batch_frames(atoms, frames);
    const int64_t nframes = int64_t(frames.size()), natoms = atoms.natoms;
    const auto params = training_->parameters(module_, false);
    const double avg = module_.attr("avg_num_neighbors").toDouble();
    const auto basis = b.basis.detach().requires_grad_(true);
    const auto y = b.y.detach().requires_grad_(true);
    const auto e = training_->energy(params, avg, basis, b.pair, y, b.i, b.j, b.atype, b.edges);
    const auto grads = torch::autograd::grad({e.sum()}, {basis, y}, {}, training, training);
    // dE/dd_e: the harmonics' part per edge, the basis's part on each pair's first edge.
    const auto grad = (grads[1].unsqueeze(2) * b.y_jacobian)
                          .sum(1)
                          .index_add(0, b.pair_edge, (grads[0].unsqueeze(2) * b.basis_jacobian).sum(1));
    // F_i = sum_j dE/dd_ij, F_j -= dE/dd_ij (d_ij = r_j - r_i); W = -sum d ⊗ dE/dd, per frame.
    Prediction p;
    p.energy = e.to(torch::kFloat64).reshape({nframes, natoms}).sum(1);
    p.forces = torch::zeros({nframes * natoms, 3}, grad.options())
                   .index_add(0, b.i, grad)
                   .index_add(0, b.j, -grad)
                   .reshape({nframes, natoms, 3});
    if (nframes == 1) {
      p.virial = (-b.d.t().matmul(grad)).unsqueeze(0);
    } else {
      p.virial = -torch::zeros({nframes, 3, 3}, grad.options())
                      .index_add(0, b.edge_frame, b.d.unsqueeze(2) * grad.unsqueeze(1));
    }
    if (training) last_ = p;
    return p;
  }

  void backward(const torch::Tensor& grad_energy, const torch::Tensor& grad_forces,
                const torch::Tensor& grad_virial) override {
    std::vector<torch::Tensor> parameters;
    for (const auto& p : module_.parameters()) parameters.push_back(p);
    backward_through_graph(last_, grad_energy, grad_forces, grad_virial, parameters);
    last_ = Prediction{};
  }

 private:
  /// A batch's frames as one graph: frame f's atoms are f*N .. f*N+N-1, and its edge, pair and
  /// table indices are offset by the edges and pairs of the frames before it.
  struct BatchedFrames {
    torch::Tensor d, i, j, pair, pair_edge, basis, basis_jacobian, y, y_jacobian, atype;
    torch::Tensor edge_frame;          ///< [E] int64, the frame of each edge (batches of 2+ frames)
    std::vector<torch::Tensor> edges;  ///< the contraction's tables (models/equivariant/message_contraction.h)
  };

  static BatchedFrames single_frame(const SystemAtoms& atoms, const FrameInput& input) {
    const auto& g = static_cast<const EquivariantFrame&>(input);
    return BatchedFrames{g.d, g.i, g.j, g.pair, g.pair_edge, g.basis, g.basis_jacobian, g.y, g.y_jacobian,
                         atoms.atype, torch::Tensor(), g.edges};
  }

  static BatchedFrames batch_frames(const SystemAtoms& atoms, const std::vector<const FrameInput*>& frames) {
    std::vector<torch::Tensor> d, i, j, pair, pair_edge, basis, basis_jacobian, y, y_jacobian, edge_frame,
        centre_offsets, by_neighbor, neighbor_offsets;
    int64_t edge_offset = 0, pair_offset = 0;
    for (size_t f = 0; f < frames.size(); ++f) {
      const auto& g = static_cast<const EquivariantFrame&>(*frames[f]);
      const int64_t atom_offset = int64_t(f) * atoms.natoms;
      d.push_back(g.d);
      i.push_back(g.i + atom_offset);
      j.push_back(g.j + atom_offset);
      pair.push_back(g.pair + pair_offset);
      pair_edge.push_back(g.pair_edge + edge_offset);
      basis.push_back(g.basis);
      basis_jacobian.push_back(g.basis_jacobian);
      y.push_back(g.y);
      y_jacobian.push_back(g.y_jacobian);
      edge_frame.push_back(torch::full({g.i.size(0)}, int64_t(f), g.i.options()));
      // Offsets [N+1] into the edges: the first frame's whole, the others' without their leading 0.
      centre_offsets.push_back((f == 0 ? g.edges[2] : g.edges[2].slice(0, 1)) + edge_offset);
      by_neighbor.push_back(g.edges[3] + edge_offset);
      neighbor_offsets.push_back((f == 0 ? g.edges[4] : g.edges[4].slice(0, 1)) + edge_offset);
      edge_offset += g.i.size(0);
      pair_offset += g.basis.size(0);
    }
    BatchedFrames b;
    b.d = torch::cat(d);
    b.i = torch::cat(i);
    b.j = torch::cat(j);
    b.pair = torch::cat(pair);
    b.pair_edge = torch::cat(pair_edge);
    b.basis = torch::cat(basis);
    b.basis_jacobian = torch::cat(basis_jacobian);
    b.y = torch::cat(y);
    b.y_jacobian = torch::cat(y_jacobian);
    b.atype = atoms.atype.repeat({int64_t(frames.size())});
    b.edge_frame = torch::cat(edge_frame);
    b.edges = {b.i, b.j, torch::cat(centre_offsets), torch::cat(by_neighbor), torch::cat(neighbor_offsets)};
    return b;
  }

  PairList pairs_of(const data::System& system, const data::Frame& frame) {
    const double r_max = settings_.config.r_max;
    // One build at a time: the builders' buffers and Kokkos are shared (prepare_frame runs on
    // worker threads; data/kokkos_runtime.h).
    std::lock_guard<std::mutex> lock(data::kokkos_mutex());
    if (settings_.dtype() == torch::kFloat32) {
      std::vector<float> pos(frame.coord.begin(), frame.coord.end());
      return pair_list(builder_float_.build(pos.data(), system.natoms(), frame.cell(), system.pbc, r_max));
    }
    return pair_list(builder_double_.build(frame.coord.data(), system.natoms(), frame.cell(), system.pbc, r_max));
  }

  EquivariantSettings settings_;
  torch::Device device_;
  torch::jit::Module module_;
  std::unique_ptr<TrainingFunction> training_;  // the energy from cached geometry
  Prediction last_;  // the prediction of the last training step, with its graph
  data::NeighborListBuilder<float> builder_float_;
  data::NeighborListBuilder<double> builder_double_;
};

}  // namespace

ModelEntry equivariant_entry() {
  ModelEntry e;
  e.name = "equivariant";
  e.keys = {"type", "type_map", "r_max", "num_features", "l_max", "parity", "num_layers", "num_bessels",
            "polynomial_p", "radial_width", "radial_depth", "avg_num_neighbors", "precision", "seed", "correlation",
            "readout",
            "data_stat_nbatch"};
  e.read = read_equivariant;
  e.record = [](const ModelSettings& settings, const torch::jit::Module&) {
    return equivariant_record(dynamic_cast<const EquivariantSettings&>(settings).config);
  };
  e.create = [](const ModelSettings& settings, const ModelContext& context) -> std::unique_ptr<Model> {
    return std::make_unique<EquivariantModel>(dynamic_cast<const EquivariantSettings&>(settings), context);
  };
  return e;
}

}  // namespace mlip::models
