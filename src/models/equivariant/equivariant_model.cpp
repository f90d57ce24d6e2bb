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
#include "models/equivariant/edge_forces.h"
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
  e.pseudotensors = m.flag("pseudotensors", e.pseudotensors);
  if (!e.pseudotensors && !e.parity)
    input::expected(m.path_of("pseudotensors"), "true when model.parity is false (without parity every irrep is natural)",
                    m.get("pseudotensors"));
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
  // Index tables on the host (a batch's are concatenated there and moved to the device once).
  torch::Tensor i, j;            ///< [E] int64 host, centre and neighbour (centres non-decreasing)
  torch::Tensor pair;            ///< [E] int64 host, the pair of edge e
  torch::Tensor pair_edge;       ///< [Q] int64 host, the edge whose vector the pair's basis is taken from
  torch::Tensor basis;           ///< [Q, num_bessels] Bessel basis times cutoff
  torch::Tensor basis_jacobian;  ///< [Q, num_bessels, 3] its derivative by d of pair_edge, 1/Å
  torch::Tensor y;               ///< [E, (l_max+1)^2] edge harmonics
  torch::Tensor y_jacobian;      ///< [E, (l_max+1)^2, 3] their derivative by d_e, 1/Å
  std::vector<torch::Tensor> edges;  ///< host, the contraction's edge tables (models/equivariant/message_contraction.h)
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

/// The saved model's edge_geometry of the edge vectors d [E, 3] with its derivatives by d:
/// basis [E, B] and y [E, Y] with basis_jacobian [E, B, 3] and y_jacobian [E, Y, 3]. Each row
/// depends on its own edge only, so the B + Y columns' Jacobians come from one forward and one
/// backward pass over B + Y copies of the edges, copy k carrying column k (docs/equivariant.md
/// "The training path"); edges in chunks, so that the copies stay small.
struct EdgeGeometry {
  torch::Tensor basis, basis_jacobian, y, y_jacobian;
};

EdgeGeometry edge_geometry_with_jacobians(torch::jit::Module& module, const torch::Tensor& d, int64_t num_basis,
                                          int64_t num_harmonics) {
  constexpr int64_t chunk = 2048;
  const int64_t edges = d.size(0), copies = num_basis + num_harmonics;
  std::vector<torch::Tensor> basis, basis_jacobian, y, y_jacobian;
  torch::AutoGradMode grad_mode(true);
  for (int64_t e0 = 0; e0 < std::max<int64_t>(edges, 1); e0 += chunk) {
    const int64_t n = std::min(chunk, edges - e0);
    const auto repeated = d.narrow(0, e0, n).detach().unsqueeze(0).expand({copies, n, 3}).contiguous();
    repeated.requires_grad_(true);
    const auto geometry = module.get_method("edge_geometry")({repeated.reshape({copies * n, 3})}).toTuple();
    const auto b = geometry->elements()[0].toTensor().reshape({copies, n, num_basis});
    const auto h = geometry->elements()[1].toTensor().reshape({copies, n, num_harmonics});
    // Copy k < B carries basis column k; copy B + k carries harmonic k.
    const auto carried = b.narrow(0, 0, num_basis).diagonal(0, 0, 2).sum() +
                         h.narrow(0, num_basis, num_harmonics).diagonal(0, 0, 2).sum();
    const auto jacobian = torch::autograd::grad({carried}, {repeated}, {}, false, false, true)[0];
    basis.push_back(b.select(0, 0).detach());
    y.push_back(h.select(0, 0).detach());
    if (jacobian.defined()) {
      basis_jacobian.push_back(jacobian.narrow(0, 0, num_basis).permute({1, 0, 2}));
      y_jacobian.push_back(jacobian.narrow(0, num_basis, num_harmonics).permute({1, 0, 2}));
    } else {  // no edges
      basis_jacobian.push_back(torch::zeros({n, num_basis, 3}, d.options()));
      y_jacobian.push_back(torch::zeros({n, num_harmonics, 3}, d.options()));
    }
  }
  return {torch::cat(basis), torch::cat(basis_jacobian), torch::cat(y), torch::cat(y_jacobian)};
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
      << (e.parity ? (e.pseudotensors ? " with parity" : " with parity, natural irreps only") : " (SO(3))") << ", "
      << e.num_layers << " layers x " << e.num_features
      << " features" << (e.correlation > 1 ? ", correlation " + std::to_string(e.correlation) : std::string())
      << (e.readout_every_layer ? ", readout of every layer" : "");
    return o.str();
  }

  std::unique_ptr<FrameInput> prepare_frame(const data::System& system, const data::Frame& frame) override {
    const PairList pairs = pairs_of(system, frame);
    auto out = std::make_unique<EquivariantFrame>();
    const auto dtype = settings_.dtype();
    out->d = pairs.vector.to(device_, dtype);
    out->i = pairs.centre;
    out->j = pairs.neighbor;
    pair_edges(pairs, out->pair, out->pair_edge);
    {
      // The geometry by the saved model's own edge_geometry, its derivatives by autograd: the
      // training path then never differentiates it (docs/equivariant.md "The training path").
      const int64_t num_harmonics = (settings_.config.l_max + 1) * (settings_.config.l_max + 1);
      const EdgeGeometry g =
          edge_geometry_with_jacobians(module_, out->d, settings_.config.num_bessels, num_harmonics);
      const auto pair_edge = out->pair_edge.to(device_);
      out->basis = g.basis.index_select(0, pair_edge);
      out->basis_jacobian = g.basis_jacobian.index_select(0, pair_edge);
      out->y = g.y;
      out->y_jacobian = g.y_jacobian.contiguous();
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
    // dE/dd_e: the harmonics' part per edge, the basis's part on each pair's first edge; then
    // F_i = sum_j dE/dd_ij, F_j -= dE/dd_ij (d_ij = r_j - r_i), W = -sum d ⊗ dE/dd per frame: one
    // node (models/equivariant/edge_forces.h).
    const EdgeGeometryTables tables{b.basis_jacobian, b.y_jacobian, b.pair_edge, b.i,      b.j,
                                    b.d,              b.edge_frame, nframes,     natoms};
    const auto [forces, virial] = edge_forces(grads[0], grads[1], tables);
    Prediction p;
    p.energy = e.to(torch::kFloat64).reshape({nframes, natoms}).sum(1);
    p.forces = forces.view({nframes, natoms, 3});
    p.virial = virial;
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
    torch::Tensor edge_frame;          ///< [E] int64, the frame of each edge
    std::vector<torch::Tensor> edges;  ///< the contraction's tables, radial weights by pair (models/equivariant/message_contraction.h)
  };

  BatchedFrames single_frame(const SystemAtoms& atoms, const FrameInput& input) const {
    const auto& g = static_cast<const EquivariantFrame&>(input);
    BatchedFrames b{g.d, g.i.to(device_), g.j.to(device_), g.pair.to(device_), g.pair_edge.to(device_),
                    g.basis, g.basis_jacobian, g.y, g.y_jacobian, atoms.atype,
                    torch::zeros({g.i.size(0)}, g.i.options().device(device_)), {}};
    b.edges = {b.i, b.j};
    for (size_t k = 2; k < g.edges.size(); ++k) b.edges.push_back(g.edges[k].to(device_));
    b.edges.push_back(b.pair);
    b.edges.push_back(b.pair_edge);
    return b;
  }

  /// One index table of a batch: the frames' host tables one after the other, frame f's entries
  /// plus offset[f], its first `skip` entries left out after the first frame (offset tables
  /// [N+1] start with 0); built on the host and moved to `device` once.
  static torch::Tensor concatenated(const std::vector<const torch::Tensor*>& tables, const std::vector<int64_t>& offset,
                                    int64_t skip, torch::Device device) {
    int64_t total = 0;
    for (size_t f = 0; f < tables.size(); ++f) total += tables[f]->size(0) - (f > 0 ? skip : 0);
    auto out = torch::empty({total}, torch::kInt64);
    int64_t* o = out.data_ptr<int64_t>();
    for (size_t f = 0; f < tables.size(); ++f) {
      const auto t = tables[f]->contiguous();
      const int64_t* v = t.data_ptr<int64_t>();
      for (int64_t k = f > 0 ? skip : 0; k < t.size(0); ++k) *o++ = v[k] + offset[f];
    }
    return out.to(device);
  }

  BatchedFrames batch_frames(const SystemAtoms& atoms, const std::vector<const FrameInput*>& frames) {
    const size_t nframes = frames.size();
    std::vector<torch::Tensor> d, basis, basis_jacobian, y, y_jacobian;
    std::vector<const torch::Tensor*> i, j, pair, pair_edge, centre_offsets, by_neighbor, neighbor_offsets;
    std::vector<int64_t> atom_offset, edge_offset, pair_offset;
    int64_t edges = 0, pairs = 0;
    for (size_t f = 0; f < nframes; ++f) {
      const auto& g = static_cast<const EquivariantFrame&>(*frames[f]);
      d.push_back(g.d);
      basis.push_back(g.basis);
      basis_jacobian.push_back(g.basis_jacobian);
      y.push_back(g.y);
      y_jacobian.push_back(g.y_jacobian);
      i.push_back(&g.i);
      j.push_back(&g.j);
      pair.push_back(&g.pair);
      pair_edge.push_back(&g.pair_edge);
      centre_offsets.push_back(&g.edges[2]);
      by_neighbor.push_back(&g.edges[3]);
      neighbor_offsets.push_back(&g.edges[4]);
      atom_offset.push_back(int64_t(f) * atoms.natoms);
      edge_offset.push_back(edges);
      pair_offset.push_back(pairs);
      edges += g.i.size(0);
      pairs += g.basis.size(0);
    }
    auto edge_frame = torch::empty({edges}, torch::kInt64);
    for (size_t f = 0; f < nframes; ++f)
      edge_frame.narrow(0, edge_offset[f], i[f]->size(0)).fill_(int64_t(f));
    BatchedFrames b;
    b.d = torch::cat(d);
    b.basis = torch::cat(basis);
    b.basis_jacobian = torch::cat(basis_jacobian);
    b.y = torch::cat(y);
    b.y_jacobian = torch::cat(y_jacobian);
    b.i = concatenated(i, atom_offset, 0, device_);
    b.j = concatenated(j, atom_offset, 0, device_);
    b.pair = concatenated(pair, pair_offset, 0, device_);
    b.pair_edge = concatenated(pair_edge, edge_offset, 0, device_);
    b.edge_frame = edge_frame.to(device_);
    b.atype = batch_types(atoms.atype, int64_t(nframes));
    b.edges = {b.i, b.j, concatenated(centre_offsets, edge_offset, 1, device_),
               concatenated(by_neighbor, edge_offset, 0, device_), concatenated(neighbor_offsets, edge_offset, 1, device_),
               b.pair, b.pair_edge};
    return b;
  }

  /// The types of a batch of `nframes` frames of the system of `atype`, kept from the last call
  /// (a system's batches are all alike; the source tensor is held, so its address is not reused).
  const torch::Tensor& batch_types(const torch::Tensor& atype, int64_t nframes) {
    if (!batch_atype_source_.defined() || !batch_atype_source_.is_same(atype) || batch_atype_frames_ != nframes) {
      batch_atype_source_ = atype;
      batch_atype_frames_ = nframes;
      batch_atype_ = atype.repeat({nframes});
    }
    return batch_atype_;
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
  torch::Tensor batch_atype_source_, batch_atype_;  // batch_types' last answer and its source
  int64_t batch_atype_frames_ = 0;
  data::NeighborListBuilder<float> builder_float_;
  data::NeighborListBuilder<double> builder_double_;
};

}  // namespace

ModelEntry equivariant_entry() {
  ModelEntry e;
  e.name = "equivariant";
  e.keys = {"type", "type_map", "r_max", "num_features", "l_max", "parity", "pseudotensors", "num_layers", "num_bessels",
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
