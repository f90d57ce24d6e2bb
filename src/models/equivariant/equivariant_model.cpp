#include "models/equivariant/equivariant_model.h"

#include <torch/csrc/autograd/autograd.h>

#include <array>
#include <cmath>
#include <map>
#include <iomanip>
#include <ostream>
#include <regex>
#include <mutex>
#include <sstream>

#include "data/kokkos_runtime.h"
#include "data/neighbor_list.h"
#include "data/neighbor_stat.h"
#include "error.h"
#include "models/finite_cast.h"
#include "models/kernels/device_kernels.h"
#include "models/kernels/host_tensor.h"
#include "models/long_range/reciprocal_energy.h"
#include "models/energy_bias.h"
#include "models/equivariant/edge_forces.h"
#include "models/equivariant/edge_geometry.h"
#include "models/equivariant/equivariant_inference.h"
#include "models/equivariant/frame_batch.h"
#include "models/equivariant/message_contraction.h"
#include "models/equivariant/training_function.h"
#include "models/module_device.h"
#include "models/pair_list.h"

namespace mlip::models {

using input::Bound;
using input::Section;

namespace {

/// The smallest avg_num_neighbors accepted when given (messages are divided by its square root).
constexpr double kMinAverageNeighbors = 1e-3;

int64_t frames_counted(const std::vector<StatisticsFrames>& frames) {
  int64_t n = 0;
  for (const StatisticsFrames& s : frames) n += int64_t(s.frames.size());
  return n;
}

std::shared_ptr<ModelSettings> read_equivariant(const Section& m, const std::vector<std::string>& type_map) {
  auto s = std::make_shared<EquivariantSettings>();
  s->type = "equivariant";
  s->type_map = type_map;
  EquivariantConfig& e = s->config;
  e.type_map = type_map;
  e.r_max = m.number("r_max", e.r_max, Bound::kPositive);
  if (e.r_max < kMinCutoff)
    input::expected(m.path_of("r_max"), "a cutoff of at least 0.5 Å (the shortest bond, H2, is 0.74 Å)",
                    m.get("r_max"));
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
  if (s->avg_num_neighbors && *s->avg_num_neighbors < kMinAverageNeighbors)
    input::expected(m.path_of("avg_num_neighbors"),
                    "a number of at least 0.001 (messages are divided by its square root)", m.get("avg_num_neighbors"));
  s->precision = m.choice("precision", s->precision, {"float64", "float32"}, {{"default", "float64"}});
  e.precision = s->precision;
  s->seed = m.seed("seed", s->seed);
  return s;
}

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

class EquivariantModel final : public Model {
 public:
  EquivariantModel(const EquivariantSettings& settings, const ModelContext& context)
      : settings_(settings), device_(context.device), static_shapes_(context.static_shapes) {
    if (device_kernels_enabled()) require_device_kernels("the equivariant model", device_);  // said before any work
    EquivariantConfig& c = settings_.config;
    c.pair_repulsion = settings_.pair_repulsion;
    c.long_range = settings_.long_range;
    if (c.long_range.enabled && static_shapes_)
      throw Error("model.long_range: the long-range term has batches of their own shapes (a k-vector set per cell), "
                  "which a captured CUDA graph cannot replay: set training.cuda_graphs: false (or leave it out)");
    c.avg_num_neighbors = settings_.avg_num_neighbors.value_or(1.0);
    c.seed = (settings_.seed ? *settings_.seed : context.training_seed.value_or(1)) + context.seed_offset;
    module_ = build_equivariant(c);
    move_module(module_, device_);  // scale and shift are plain attributes: Module::to leaves them
    training_ = std::make_unique<TrainingFunction>(c);
    training_->to(device_);
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
    if (settings_.long_range.enabled)
      o << ", long-range charges (sigma " << settings_.long_range.sigma << " Å, kspace_spacing "
        << settings_.long_range.kspace_spacing << " Å)";
    o << ", contractions by "
      << kernel_route_name(device_);
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
      // The geometry and its derivatives, computed directly on the host, by the saved model's
      // own edge_geometry and autograd elsewhere: the training path then never differentiates
      // it (docs/equivariant.md "The training path").
      const int64_t num_harmonics = (settings_.config.l_max + 1) * (settings_.config.l_max + 1);
      const EdgeGeometry g = on_host(out->d)
                                 ? edge_geometry_direct(settings_.config, out->d)
                                 : edge_geometry_by_autograd(module_, out->d, settings_.config.num_bessels, num_harmonics);
      const auto pair_edge = out->pair_edge.to(device_);
      out->basis = g.basis.index_select(0, pair_edge);
      out->basis_jacobian = g.basis_jacobian.index_select(0, pair_edge);
      out->y = g.y;
      out->y_jacobian = g.y_jacobian.contiguous();
    }
    out->edges = TrainingFunction::edge_tables(out->i, out->j, system.natoms());
    if (settings_.long_range.enabled) long_range_inputs(system, frame, *out);
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
    // Each number checked in the model's dtype before it becomes a buffer (models/finite_cast.h).
    const auto dtype = settings_.dtype();
    const auto scales = finite_cast(torch::full({ntypes}, scale, torch::kFloat64),
                                    dtype, "the scale (RMS of the force labels, eV/Å)");
    const auto shifts = finite_cast(shift, dtype, "the per-type energy shift (eV per atom)", settings_.type_map);
    module_.run_method("set_scale_shift", scales.to(device_), shifts.to(device_));
    if (!settings_.avg_num_neighbors && !(pairs > 0)) {
      std::ostringstream msg;
      msg << "model.r_max " << settings_.config.r_max << ": no pair of atoms of the " << frames_counted(frames)
          << " statistics frames is within it, so the model would see no neighbour (avg_num_neighbors: auto is "
             "0); is r_max right (in Å)?";
      throw Error(msg.str());
    }
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
    return predict_batch(batch_of(atoms, frames), atoms.natoms, training);
  }

  std::vector<torch::Tensor> pack(const SystemAtoms& atoms, const std::vector<const FrameInput*>& frames) override {
    if (!static_shapes_) return Model::pack(atoms, frames);
    return tensors_of(batch_of(atoms, frames));
  }

  Prediction predict_packed(const SystemAtoms& atoms, const std::vector<torch::Tensor>& packed,
                            bool training) override {
    if (!static_shapes_) return Model::predict_packed(atoms, packed, training);
    return predict_batch(batch_from(packed), atoms.natoms, training);
  }

  void backward(const torch::Tensor& grad_energy, const torch::Tensor& grad_forces, const torch::Tensor& grad_virial,
                const torch::Tensor& grad_charges) override {
    std::vector<torch::Tensor> parameters;
    for (const auto& p : module_.parameters()) parameters.push_back(p);
    backward_through_graph(last_, grad_energy, grad_forces, grad_virial, grad_charges, parameters);
    last_ = Prediction{};
  }

  std::vector<int64_t> shape_key(const SystemAtoms& atoms,
                                 const std::vector<const FrameInput*>& frames) const override {
    if (!static_shapes_) return {};
    int64_t edges = 0, pairs = 0;
    for (const FrameInput* f : frames) {
      const auto& g = static_cast<const EquivariantFrame&>(*f);
      edges += g.i.size(0);
      pairs += g.basis.size(0);
    }
    const PaddedSizes padded = padded_sizes(edges, pairs);
    return {int64_t(frames.size()), atoms.natoms, padded.edges, padded.pairs};
  }

 private:
  /// predict() of a batch of frames of `natoms` atoms each. With the long-range term
  /// (docs/long_range.md "Training") the energy function also gives each atom's raw charge; E_long
  /// of each frame comes from the charges, positions and cell, its gradient by the basis and
  /// harmonics (through the charges) joins the short-range one on the edges, and its direct
  /// gradient by positions and cell is added after.
  Prediction predict_batch(const FrameBatch& b, int64_t natoms, bool training) {
    const int64_t nframes = b.atype.size(0) / natoms;
    const bool long_range = settings_.long_range.enabled;
    const auto params = training_->parameters(module_, false);
    const double avg = module_.attr("avg_num_neighbors").toDouble();
    const auto basis = b.basis.detach().requires_grad_(true);
    const auto y = b.y.detach().requires_grad_(true);
    std::vector<torch::Tensor> by = {basis, y};
    const auto out = training_->energy(params, avg, basis, b.pair, y, b.i, b.j, b.atype, b.edges);
    torch::Tensor energy = (long_range ? out.select(1, 0) : out).to(torch::kFloat64).reshape({nframes, natoms}).sum(1);
    if (long_range && long_range_fused(b.periodic, b.pos)) return predict_fused(b, basis, y, out, energy, natoms, training);
    torch::Tensor charges;
    if (long_range) {
      by.push_back(b.pos.detach().reshape({nframes, natoms, 3}).requires_grad_(true));
      by.push_back(b.cell.detach().requires_grad_(true));
      const LongRangeBatch term = long_range_batch(
          module_, settings_.long_range, out.select(1, 1).reshape({nframes, natoms}), by[2], by[3], b.periodic);
      energy = energy + term.energy;
      charges = term.charges;
    }
    auto grads = torch::autograd::grad({energy.sum()}, by, {}, training, training, true);
    for (int k = 0; k < 2; ++k)
      if (!grads[size_t(k)].defined()) grads[size_t(k)] = torch::zeros_like(by[size_t(k)]);
    // dE/dd_e: the harmonics' part per edge, the basis's part on each pair's first edge; then
    // F_i = sum_j dE/dd_ij, F_j -= dE/dd_ij (d_ij = r_j - r_i), W = -sum d ⊗ dE/dd per frame: one
    // node (models/equivariant/edge_forces.h).
    const EdgeGeometryTables tables{b.basis_jacobian, b.y_jacobian, b.pair_edge, b.i,      b.j,
                                    b.d,              b.edge_frame, nframes,     natoms};
    const auto [forces, virial] = edge_forces(grads[0], grads[1], tables);
    Prediction p;
    p.energy = energy;
    p.forces = forces.view({nframes, natoms, 3});
    p.virial = virial;
    p.charges = charges;
    if (long_range) {
      const auto [direct_forces, direct_virial] =
          long_range_direct_forces(by[2], by[3], grads[2], grads[3], forces.scalar_type());
      p.forces = p.forces + direct_forces;
      p.virial = p.virial + direct_virial;
    }
    if (training) last_ = p;
    return p;
  }

  /// predict_batch's end for a batch whose long-range term runs fused (docs/long_range.md "The k-sum
  /// in training"): E_long, the seeds ∂E_long/∂q̃ and the fixed-charge forces and virial from one
  /// operation; one gradient of E_short + Σ seeds·q̃ by the basis and harmonics gives the rest of the
  /// forces (the charges' dependence on the pairs). basis, y: the leaves the energy function took;
  /// `out`: its [atoms, 2]; `short_energy`: [B] float64.
  Prediction predict_fused(const FrameBatch& b, const torch::Tensor& basis, const torch::Tensor& y,
                           const torch::Tensor& out, const torch::Tensor& short_energy, int64_t natoms, bool training) {
    const int64_t nframes = short_energy.size(0);
    const torch::Tensor raw = out.select(1, 1).reshape({nframes, natoms});
    const ReciprocalBatchTerms term =
        reciprocal_batch(settings_.long_range, raw.to(torch::kFloat64), b.pos.reshape({nframes, natoms, 3}), b.cell);
    const torch::Tensor total_short = short_energy.sum();
    auto grads = torch::autograd::grad({total_short, raw}, {basis, y},
                                       {torch::ones_like(total_short), term.seeds.to(raw.scalar_type())}, training,
                                       training, true);
    for (int k = 0; k < 2; ++k)
      if (!grads[size_t(k)].defined()) grads[size_t(k)] = torch::zeros_like(k == 0 ? basis : y);
    const EdgeGeometryTables tables{b.basis_jacobian, b.y_jacobian, b.pair_edge, b.i,      b.j,
                                    b.d,              b.edge_frame, nframes,     natoms};
    const auto [forces, virial] = edge_forces(grads[0], grads[1], tables);
    Prediction p;
    p.energy = short_energy + term.energy;
    p.forces = forces.view({nframes, natoms, 3}) + term.forces.to(forces.scalar_type());
    p.virial = virial + term.virial.to(virial.scalar_type());
    p.charges = term.charges;
    if (training) last_ = p;
    return p;
  }

  /// The positions and cell of a frame for the long-range term (EquivariantFrame::pos, cell).
  void long_range_inputs(const data::System& system, const data::Frame& frame, EquivariantFrame& out) const {
    LongRangeFrame inputs = long_range_frame(system, frame, device_);
    out.pos = std::move(inputs.pos);
    out.cell = std::move(inputs.cell);
    out.periodic = inputs.periodic;
  }


  /// The batch as one graph (models/equivariant/frame_batch.h), padded with static_shapes.
  FrameBatch batch_of(const SystemAtoms& atoms, const std::vector<const FrameInput*>& frames) {
    std::vector<const EquivariantFrame*> inputs;
    for (const FrameInput* f : frames) inputs.push_back(static_cast<const EquivariantFrame*>(f));
    if (inputs.size() == 1 && !static_shapes_) {
      FrameBatch b = single_frame_batch(*inputs[0], device_);
      b.atype = atoms.atype;
      return b;
    }
    FrameBatch b = frame_batch(inputs, atoms.natoms, device_);
    b.atype = batch_types(atoms.atype, int64_t(inputs.size()));
    if (static_shapes_) pad_to_buckets(b, int64_t(inputs.size()), int64_t(inputs.size()) * atoms.natoms);
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
  bool static_shapes_;  // ModelContext::static_shapes: batches padded to buckets
  torch::jit::Module module_;
  std::unique_ptr<TrainingFunction> training_;  // the energy from cached geometry
  Prediction last_;  // the prediction of the last training step, with its graph
  torch::Tensor batch_atype_source_, batch_atype_;  // batch_types' last answer and its source
  int64_t batch_atype_frames_ = 0;
  data::NeighborListBuilder<float> builder_float_;
  data::NeighborListBuilder<double> builder_double_;
};

}  // namespace

namespace {

/// What a training batch of the equivariant model holds, about (docs/training.md "Memory checked
/// before the first allocation"): the weights with their gradients and Adam's two moments; the
/// neighbour list and cached geometry of the batch's pairs (basis, harmonics, vectors); per
/// layer and pair, the radial MLP's hidden values with their derivatives, its outputs and the
/// messages; per layer and atom, the features; the made frames held at once and one being made.
/// Measured peaks are 0.7-1.0x this (docs/training.md).
MemoryEstimate equivariant_memory(const ModelSettings& settings, const BatchSizes& batch) {
  const EquivariantConfig& c = dynamic_cast<const EquivariantSettings&>(settings).config;
  const EquivariantSizes sizes = equivariant_sizes(c);
  const double value = c.precision == "float32" ? 4.0 : 8.0;
  double weights = 0.0;
  for (const auto& [name, shape] : sizes.parameters) {
    double n = 1.0;
    for (int64_t d : shape) n *= double(d);
    weights += n;
  }
  const double frames = double(batch.frames), pairs = batch.pairs, atoms = double(batch.atoms);
  const double harmonics = double((c.l_max + 1) * (c.l_max + 1));
  double per_pair = 0.0, per_atom = 0.0;
  for (size_t k = 0; k < sizes.paths.size(); ++k) {
    // The radial MLP's hidden values twice: their values and their derivatives, which the forces'
    // backward pass keeps (measured: docs/training.md "Memory checked before the first allocation").
    per_pair += 2.0 * double(c.radial_width) * double(c.radial_depth) +
                double(c.num_features) * double(sizes.paths[k]) +
                double(c.num_features) * double(sizes.message_components[k]);
    per_atom += double(c.num_features) * double(sizes.input_components[k] + sizes.message_components[k]);
  }
  std::ostringstream radius_text;
  radius_text << "model.r_max " << c.r_max << " Å (about " << std::setprecision(2) << pairs << " pairs in a frame of "
              << batch.atoms << " atoms)";
  const std::string radius = radius_text.str();
  const std::string layers = "num_layers " + std::to_string(c.num_layers) + ", num_features " +
                             std::to_string(c.num_features) + ", radial_width " + std::to_string(c.radial_width) +
                             ", radial_depth " + std::to_string(c.radial_depth);
  MemoryEstimate e;
  std::ostringstream weight_count;
  weight_count << std::setprecision(3) << weights;
  e.parts.push_back({"the " + weight_count.str() + " weights, their gradients and Adam's two moments",
                     "model." + layers + ", num_bessels " + std::to_string(c.num_bessels), 4.0 * weights * value});
  e.parts.push_back({"the neighbour list of one frame", radius, pairs * data::kNeighborPairBytes});
  // A made frame (EquivariantFrame) per edge: its vector (3), the basis and its derivative of
  // half the edges (num_bessels x 4 / 2), the harmonics and their derivatives (4 (l_max+1)^2),
  // and 36 bytes of index tables (i, j, pair, by_neighbor, pair_edge of half); 16 bytes per atom.
  const double nb = double(c.num_bessels);
  e.frame_bytes = pairs * ((3.0 + 2.0 * nb + 4.0 * harmonics) * value + 36.0) + 16.0 * (atoms + 1.0);
  const std::string geometry = radius + ", num_bessels " + std::to_string(c.num_bessels) + ", l_max " +
                               std::to_string(c.l_max);
  const double held = frames + double(batch.frames_ahead);
  e.parts.push_back({"the pairs and geometry of the " + std::to_string(int64_t(held)) +
                         " made frame(s) held at once (the batch's and those made ahead)",
                     geometry, held * e.frame_bytes});
  e.parts.push_back({"the batch's pairs and geometry gathered into one graph", geometry, frames * e.frame_bytes});
  // While a frame is made: the pair list (vector, centre, neighbour, image: 48 bytes), the
  // geometry of every edge before half is kept (basis and harmonics with derivatives), and the
  // map that pairs each edge with its reverse (about 24 bytes an edge).
  e.parts.push_back({"a frame's pairs and geometry while it is made", geometry,
                     pairs * (72.0 + (4.0 * nb + 4.0 * harmonics) * value)});
  e.parts.push_back({"the radial MLPs' values and the messages of the batch's pairs in every layer",
                     radius + ", " + layers, frames * pairs * per_pair * value});
  e.parts.push_back({"the features of the batch's atoms in every layer", "model." + layers,
                     frames * atoms * per_atom * value});
  return e;
}

/// Fine-tuning roles of the module's attributes (docs/training.md "Fine-tuning"): the element
/// embedding, each layer's per-element product weights (pw_) and self-connections (sc_), and the
/// per-type scale and shift have a row per type; the coupling coefficients (cg, pc) are made from
/// the settings, and the mean neighbour count from the input (auto: the new data), so that the
/// messages keep the size the shared weights were trained on when the new molecules are denser
/// (bench/README.md "Fine-tuning"); every other weight is shared by all elements.
AttributeRole equivariant_attribute_role(const ModelSettings&, const std::string& name) {
  static const std::regex per_type(R"(^(embed|scale|shift|l\d+_pw_.*|l\d+_sc_.*)$)");
  static const std::regex from_settings(R"(^(l\d+_(cg\d+|pc\d+[ab])|avg_num_neighbors|zbl_.*)$)");
  AttributeRole role;
  if (name == "charge_readout") role.kind = AttributeRole::Kind::kOptional;  // model.long_range's
  else if (std::regex_match(name, per_type)) role.kind = AttributeRole::Kind::kTypeRows;
  else if (std::regex_match(name, from_settings)) role.kind = AttributeRole::Kind::kDerived;
  return role;
}

}  // namespace

ModelEntry equivariant_entry() {
  ModelEntry e;
  e.name = "equivariant";
  e.keys = {"type", "type_map", "r_max", "num_features", "l_max", "parity", "pseudotensors", "num_layers", "num_bessels",
            "polynomial_p", "radial_width", "radial_depth", "avg_num_neighbors", "precision", "seed", "correlation",
            "readout",
            "data_stat_nbatch"};
  e.read = read_equivariant;
  e.long_range = true;
  e.record = [](const ModelSettings& settings, const torch::jit::Module&) {
    return equivariant_record(dynamic_cast<const EquivariantSettings&>(settings).config);
  };
  e.attribute_role = equivariant_attribute_role;
  e.create = [](const ModelSettings& settings, const ModelContext& context) -> std::unique_ptr<Model> {
    return std::make_unique<EquivariantModel>(dynamic_cast<const EquivariantSettings&>(settings), context);
  };
  e.memory = equivariant_memory;
  return e;
}

}  // namespace mlip::models
